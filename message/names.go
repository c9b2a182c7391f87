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
