package storage

import "time"

// startLoops starts the background work: the commitlog flusher (async
// mode), the checkpointer and retention. Close stops them.
func (s *Store) startLoops() {
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.flushLoop()
	}()
	go func() {
		defer s.wg.Done()
		s.retentionLoop()
	}()
}

func (s *Store) flushLoop() {
	cpTick := time.NewTicker(s.cfg.CheckpointInterval)
	defer cpTick.Stop()
	var flushC <-chan time.Time
	if s.cfg.FlushMode == FlushAsync {
		t := time.NewTicker(s.cfg.FlushInterval)
		defer t.Stop()
		flushC = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-flushC:
			if s.Err() != nil {
				continue
			}
			if err := s.cl.flush(); err != nil {
				s.fail(err) // reported by Err and Failed
			}
		case <-cpTick.C:
			// A failed commitlog flush fails the store (reported by Err
			// and Failed); the rest is derived data and the checkpoint,
			// which the next checkpoint tries again.
			if err := s.checkpoint(); err != nil && s.Err() == nil {
				s.log.Error("checkpoint failed", "err", err)
			}
		}
	}
}

func (s *Store) retentionLoop() {
	t := time.NewTicker(s.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			if _, err := s.DeleteExpired(now); err != nil {
				s.log.Error("retention failed", "err", err)
			}
		}
	}
}
