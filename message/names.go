package message

// The names the contract fixes: system topics, the properties brokers and
// clients read, and the topic permission bits. They are RocketMQ's, so a
// RocketMQ user finds what they expect (MixAll and MessageConst in
// rocketmq-common); each is defined here once, for brokers, the SDK and
// the CLI alike.

// RetryPrefix and DLQPrefix begin a consumer group's retry and
// dead-letter topics.
const (
	RetryPrefix = "%RETRY%"
	DLQPrefix   = "%DLQ%"
)

// RetryTopic names consumer group's retry topic.
func RetryTopic(group string) string { return RetryPrefix + group }

// DLQTopic names consumer group's dead-letter topic.
func DLQTopic(group string) string { return DLQPrefix + group }

// ScheduleTopic holds delayed messages until they are due: each of its
// queues one fixed delay (the delay levels, then the timer ladder).
const ScheduleTopic = "SCHEDULE_TOPIC_XXXX"

// Properties of the retry and delay path.
const (
	PropertyRealTopic      = "REAL_TOPIC"        // where a delayed message goes when due
	PropertyRealQueue      = "REAL_QID"          // and to which queue
	PropertyDelayLevel     = "DELAY"             // its delay level
	PropertyRetryTopic     = "RETRY_TOPIC"       // the topic the message was first sent to
	PropertyOriginMsgID    = "ORIGIN_MESSAGE_ID" // the id of its first copy
	PropertyReconsumeTimes = "RECONSUME_TIME"    // how many times it was sent back
)

// Properties of timer messages, RocketMQ 5's (MessageConst): a producer
// sets one of the first three; the broker sets TIMER_OUT_MS, the time the
// message is due, and keeps it on the delivered message.
const (
	PropertyTimerDeliverMS = "TIMER_DELIVER_MS" // deliver at this unix time, in ms
	PropertyTimerDelaySec  = "TIMER_DELAY_SEC"  // deliver this many seconds after the broker stores it
	PropertyTimerDelayMS   = "TIMER_DELAY_MS"   // likewise, in ms
	PropertyTimerOutMS     = "TIMER_OUT_MS"     // when it is due, unix ms
)

// Transactional messages, RocketMQ's names (MessageConst, TopicValidator):
// a producer sends a half message with TRAN_MSG=true and PGROUP, its
// producer group; the broker holds it in the half topic, with its topic
// and queue in REAL_TOPIC and REAL_QID, until the producer commits or
// rolls it back. A half still open after the last check-back is rolled
// back, and a copy of it stored in the check-max topic for operators.
const (
	TransHalfTopic     = "RMQ_SYS_TRANS_HALF_TOPIC"
	TransCheckMaxTopic = "TRANS_CHECK_MAX_TIME_TOPIC"

	PropertyTransactionPrepared   = "TRAN_MSG"                // "true" on a half message
	PropertyProducerGroup         = "PGROUP"                  // the producer group a check-back asks
	PropertyTransactionID         = "__transactionId__"       // the half's UNIQ_KEY
	PropertyTransactionCheckTimes = "TRANSACTION_CHECK_TIMES" // check-backs made, on the check-max copy
)

// Reserved reports whether a topic is the broker's own: the schedule, half
// and check-max topics, which no producer sends to directly.
func Reserved(topic string) bool {
	switch topic {
	case ScheduleTopic, TransHalfTopic, TransCheckMaxTopic:
		return true
	}
	return false
}

// AsksForDelay reports whether a property of this name asks the broker to
// hold the message back: a delay level or a timer.
func AsksForDelay[T string | []byte](name T) bool {
	switch string(name) {
	case PropertyDelayLevel, PropertyTimerDeliverMS, PropertyTimerDelaySec, PropertyTimerDelayMS:
		return true
	}
	return false
}

// Topic permission bits of pb.TopicConfig.Perm (RocketMQ's PermName).
const (
	PermRead  = 4
	PermWrite = 2
)
