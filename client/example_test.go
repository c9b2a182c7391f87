package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/raftmq/raftmq/client"
)

// Produce: sync, async and one-way sends, and a batch. Run `raftmq dev`
// first; its name server listens on 127.0.0.1:9876.
func ExampleProducer() {
	p, err := client.NewProducer(client.WithNameServers("127.0.0.1:9876"))
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown()
	ctx := context.Background()

	r, err := p.Send(ctx, &client.Message{Topic: "orders", Tags: "created", Keys: []string{"order-1"}, Body: []byte("hello")})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored as", r.MsgID, "in", r.Queue, "at", r.QueueOffset)

	p.SendAsync(ctx, &client.Message{Topic: "orders", Body: []byte("async")}, func(r *client.SendResult, err error) {
		if err != nil {
			log.Print(err)
		}
	})
	p.SendOneway(ctx, &client.Message{Topic: "orders", Body: []byte("fire and forget")})
	p.SendBatch(ctx, []*client.Message{{Topic: "orders", Body: []byte("a")}, {Topic: "orders", Body: []byte("b")}})
}

// Orderly: messages with the same sharding key go to the same queue, in
// order.
func ExampleProducer_SendOrderly() {
	p, _ := client.NewProducer(client.WithNameServers("127.0.0.1:9876"))
	p.Start()
	defer p.Shutdown()
	for _, step := range []string{"created", "paid", "shipped"} {
		if _, err := p.SendOrderly(context.Background(), &client.Message{Topic: "orders", Tags: step, Body: []byte("order-42 " + step)}, "order-42"); err != nil {
			log.Fatal(err)
		}
	}
}

// Push consume: the group's members share the topic's queues; the listener
// gets each message, and what it asks to retry comes again.
func ExamplePushConsumer() {
	c, err := client.NewPushConsumer(client.PushConfig{ConsumeFrom: client.ConsumeFromFirst},
		client.WithNameServers("127.0.0.1:9876"), client.WithGroup("billing"))
	if err != nil {
		log.Fatal(err)
	}
	err = c.Subscribe("orders", "created || paid", func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		for _, m := range msgs {
			fmt.Printf("%s %s: %s\n", m.MsgID, m.Tags, m.Body)
		}
		return client.ConsumeSuccess
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(); err != nil {
		log.Fatal(err)
	}
	time.Sleep(10 * time.Second) // consume a while
	c.Shutdown()                 // commits the group's offsets
}

// Pull consume: the application chooses queues and offsets, and commits.
func ExamplePullConsumer() {
	c, _ := client.NewPullConsumer(client.WithNameServers("127.0.0.1:9876"), client.WithGroup("audit"))
	c.Start()
	defer c.Shutdown()
	ctx := context.Background()
	queues, err := c.Queues(ctx, "orders")
	if err != nil {
		log.Fatal(err)
	}
	for _, mq := range queues {
		off, _ := c.FetchOffset(ctx, mq)
		if off < 0 {
			off, _, _ = c.Offsets(ctx, mq)
		}
		// Waits up to 5 s on the broker when nothing is there.
		r, err := c.PullBlocking(ctx, mq, "*", off, 32, 5*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range r.Messages {
			fmt.Printf("%v@%d %s\n", mq, m.QueueOffset, m.Body)
		}
		c.CommitOffset(ctx, mq, r.NextOffset)
	}
}
