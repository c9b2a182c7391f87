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

// ScheduleTopic holds delayed messages, one queue per delay level.
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

// Topic permission bits of pb.TopicConfig.Perm (RocketMQ's PermName).
const (
	PermRead  = 4
	PermWrite = 2
)
