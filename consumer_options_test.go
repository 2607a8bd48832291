package acemq_test

import (
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/stretchr/testify/assert"
)

// TestMisplacedOptionsCannotBeSmuggled: the options that belong to one
// kind of consumer are of a type the other kinds' option interfaces do not
// match, even by a type assertion at run time, so a misplaced one is
// refused by the compiler (internal/repotest's
// TestMisplacedOptionsDoNotCompile) and cannot reach the wrong
// constructor another way. The options of every consumer match both.
func TestMisplacedOptionsCannotBeSmuggled(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]any{"BatchSize": acemq.BatchSize(10), "BatchWait": acemq.BatchWait(time.Second)} {
		_, ok := o.(acemq.ConsumerOption)
		assert.False(t, ok, "%s is a ConsumerOption", name)
	}
	_, ok := any(acemq.Ordered(acemq.OrderPolicy{})).(acemq.BatchConsumerOption)
	assert.False(t, ok, "Ordered is a BatchConsumerOption")
	var every acemq.AnyConsumerOption = acemq.Concurrency(1)
	_, ok = any(every).(acemq.ConsumerOption)
	assert.True(t, ok)
	_, ok = any(every).(acemq.BatchConsumerOption)
	assert.True(t, ok)
}
