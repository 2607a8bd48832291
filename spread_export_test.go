package acemq

import (
	"context"
	"time"
)

// SpreaderForTest lets the black-box tests of spread_test.go drive the
// unexported spreader.
type SpreaderForTest struct{ s *spreader }

// NewSpreaderForTest is newSpreader on c's transport and logger, ticking
// about every period.
func NewSpreaderForTest(c *Conn, queue string, partitions int, quorum bool, period time.Duration) (*SpreaderForTest, error) {
	s, err := newSpreader(c.Transport(), queue, partitions, quorum, c.cfg.logger)
	if err != nil {
		return nil, err
	}
	s.period = period
	return &SpreaderForTest{s: s}, nil
}

// Run is the spreader's run.
func (x *SpreaderForTest) Run(ctx context.Context, onChange func(held []int)) error {
	return x.s.run(ctx, onChange)
}

// Held is the spreader's held.
func (x *SpreaderForTest) Held() []int { return x.s.held() }
