package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/e2e/lazyfs"
)

// Power-loss drills (issue #16): each broker's whole data dir (commitlog,
// consume queues, index, checkpoint, Raft log, stable store, snapshots)
// lives on a lazyfs mount, which at a power cut loses every change not
// fsynced since. A power cut of a replica is a kill -9 followed by that
// loss, before it starts again.

// newPowerCluster is a procCluster whose brokers keep their data on lazyfs.
func newPowerCluster(t *testing.T, opts lazyfs.Options) *procCluster {
	if err := lazyfs.Available(); err != nil {
		t.Skip(err.Error() + " (CI runs the power-loss drills as root)")
	}
	c := procClusterAddrs(t)
	c.diskOpts = &opts
	c.run()
	return c
}

// mountDisks mounts a lazyfs on each broker's data dir, over a backing
// directory beside it, unmounted when the test ends (after the brokers
// are killed: cleanups run last first).
func (c *procCluster) mountDisks() {
	for i := range c.procs {
		backing, dir := filepath.Join(c.dir, fmt.Sprintf("disk%d", i+1)), filepath.Join(c.dir, fmt.Sprint(i+1))
		for _, d := range []string{backing, dir} {
			if err := os.Mkdir(d, 0o755); err != nil {
				c.t.Fatal(err)
			}
		}
		m, err := lazyfs.New(backing, dir, *c.diskOpts)
		if err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() {
			if err := m.Close(); err != nil {
				c.t.Error(err)
			}
		})
		c.disks = append(c.disks, m)
	}
}

// powerLoss cuts the power of the replicas given, all at once: each is
// killed, then loses what it had not fsynced. They stay down; start brings
// them back.
func (c *procCluster) powerLoss(tear bool, replicas ...int) {
	for _, i := range replicas {
		c.kill(i)
	}
	var wg sync.WaitGroup
	for _, i := range replicas {
		wg.Go(func() {
			loss, err := c.disks[i].PowerLoss(tear)
			if err != nil {
				c.t.Error(err)
				return
			}
			c.t.Logf("replica %d lost power: %d changes to %d files undone (%d bytes put back)", i+1, loss.Changes, loss.Files, loss.Bytes)
		})
	}
	wg.Wait()
	if c.t.Failed() {
		c.t.FailNow()
	}
}

// The master loses power and starts again 1 s later.
func TestDrillMasterPowerLoss(t *testing.T) {
	c := newPowerCluster(t, lazyfs.Options{})
	runDrill(t, "master power loss", c, func() {
		m := c.master()
		c.powerLoss(true, m)
		time.Sleep(time.Second) // the outage
		c.start(m)
	})
}

// Every replica of the group loses power at once, and all start again.
func TestDrillGroupPowerLoss(t *testing.T) {
	c := newPowerCluster(t, lazyfs.Options{})
	runDrillWith(t, "group power loss", c, func(h *History) {
		cut := time.Now()
		c.powerLoss(true, 0, 1, 2)
		time.Sleep(time.Second) // the outage
		h.Outage(cut, time.Now())
		c.startAll(0, 1, 2)
	})
}

// The master is cut off the network (the others elect a master while it
// still takes writes it cannot commit), then loses power, and comes back
// on a healed network.
func TestDrillMasterPartitionedThenPowerLoss(t *testing.T) {
	if err := lazyfs.Available(); err != nil {
		t.Skip(err.Error() + " (CI runs the power-loss drills as root)")
	}
	c, l := newNetCluster(t, &lazyfs.Options{})
	runDrill(t, "master cut off, then power loss", c, func() {
		m := c.master()
		l.cut(m)
		time.Sleep(2 * time.Second) // the partition: a new master is elected
		c.powerLoss(true, m)
		l.heal(m)
		c.start(m)
		c.caughtUp(m)
	})
}

// The control: the same whole-group power cut on disks whose fsync
// persists nothing must lose acknowledged messages, or the drills could
// not fail. The disks start lying once the group has started: a disk
// that lied from the first write leaves raft-wal's metadata empty, and the
// brokers rightly refuse to start on it (checkWALMeta), which shows
// nothing about acknowledged messages.
func TestDrillGroupPowerLossWithoutFsyncLoses(t *testing.T) {
	c := newPowerCluster(t, lazyfs.Options{})
	c.master()
	for _, d := range c.disks {
		d.IgnoreFsync(true)
	}
	h := driveDrill(t, c, func(*History) {
		c.powerLoss(false, 0, 1, 2)
		time.Sleep(time.Second) // the outage
		c.startAll(0, 1, 2)
	})
	// What survived is read back quickly; what was lost never is.
	readBack(t, c, h, 15*time.Second)
	r := h.Check()
	t.Logf("drill group power loss, fsync ignored: %s", r)
	if len(r.Lost)+len(r.NotStored) == 0 || r.OK() {
		t.Fatalf("no acknowledged message lost with fsync ignored (%d acked): the power-loss drills cannot fail", r.Acked)
	}
}

// Repeated power cuts of random replicas at random moments under a
// sustained load: a longer set, run with RAFTMQ_E2E_LONG=1.
func TestDrillPowerLossRepeated(t *testing.T) {
	if os.Getenv("RAFTMQ_E2E_LONG") == "" {
		t.Skip("the long power-loss set runs with RAFTMQ_E2E_LONG=1")
	}
	c := newPowerCluster(t, lazyfs.Options{})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	runDrillWith(t, "power loss x20", c, func(h *History) {
		for round := 0; round < 20; round++ {
			var victims []int
			switch rng.IntN(3) {
			case 0:
				victims = []int{c.master()}
			case 1:
				victims = []int{rng.IntN(3)}
			default:
				victims = []int{0, 1, 2}
			}
			cut := time.Now()
			c.powerLoss(rng.IntN(2) == 0, victims...)
			time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond) // the outage
			// No quorum powered: the drill's own outage.
			if len(victims) > 1 {
				h.Outage(cut, time.Now())
			}
			restart := time.Now()
			c.startAll(victims...)
			started := time.Since(restart)
			clustertest.WaitFor(t, 30*time.Second, "a master", func() bool { return c.master() >= 0 })
			mastered := time.Since(restart)
			var acked time.Duration
			clustertest.WaitFor(t, 30*time.Second, "an ack", func() bool {
				first := h.FirstAckAfter(restart)
				acked = first.Sub(restart)
				return !first.IsZero()
			})
			// Where a round's gap goes, from the restart on.
			t.Logf("round %d: replicas %v off %v; from their start: all started %v, a master %v, the first ack %v",
				round+1, victims, restart.Sub(cut).Round(time.Millisecond), started.Round(time.Millisecond),
				mastered.Round(time.Millisecond), acked.Round(time.Millisecond))
			time.Sleep(time.Duration(300+rng.IntN(2000)) * time.Millisecond) // traffic between faults
			t.Logf("round %d: per producer, last ack before the cut and first after the start: %v", round+1, h.AcksAround(cut, restart))
		}
	})
}
