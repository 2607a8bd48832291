package blob

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sweep deletes from s the objects that s.Expired(ctx, now) lists, and
// only those, and returns how many it deleted. An object whose expiry is
// now or later, or that has none, is never deleted: expiry is how a
// payload stays readable while a message can still be retried, replayed
// or inspected in a .dlq queue, so whoever sets the expiry decides, and
// Sweep only carries the decision out.
//
// A Delete that fails is skipped and the sweep goes on, as it does past
// an object the listing could not read (a Dir store's corrupt sidecar):
// one bad entry never stops the expired objects after it from being
// deleted. The returned error joins every failure, each naming its object
// or file. A cancelled ctx ends the sweep with the ctx's error.
func Sweep(ctx context.Context, s Store, now time.Time) (deleted int, err error) {
	if s == nil {
		return 0, errors.New("blob: Sweep was given a nil Store")
	}
	var errs []error
	for id, err := range s.Expired(ctx, now) {
		if err != nil {
			if ctx.Err() != nil {
				errs = append(errs, ctx.Err())
				break
			}
			errs = append(errs, fmt.Errorf("blob: sweep: %w", err))
			continue // the listing ends itself when it cannot go on
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if err := s.Delete(ctx, id); err != nil {
			if ctx.Err() != nil {
				errs = append(errs, ctx.Err())
				break
			}
			errs = append(errs, fmt.Errorf("blob: sweep: deleting %q: %w", id, err))
			continue
		}
		deleted++
	}
	return deleted, errors.Join(errs...)
}
