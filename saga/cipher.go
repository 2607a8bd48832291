package saga

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/acemq/acemq"
)

// WithStateCipher seals each instance's state with c (a crypt.Keys or
// crypt.Subjects, the cipher the Conn is given with
// acemq.WithBodyCipher) before it is written to the saga's table, and
// opens it when a step or Get loads it. What the table holds per instance
// is its correlation ID, version, completion and times in the clear, and
// its state sealed, as the JSON {"acemq_sealed": {"key": ID, "data":
// base64}} (so it still fits the state column, JSONB on PostgreSQL). The
// state is bound to the saga's name and the correlation ID: a sealed
// state copied onto another instance does not open. A per-subject cipher
// chooses the key from the envelope of the message whose step saves the
// state. A state that does not open (its key removed or shredded, its
// bytes changed, or a plain state that c refuses: see crypt.AllowPlain)
// parks the message whose step loads it, as an undecodable state does,
// and fails Get and List. A nil c makes New fail.
func WithStateCipher(c acemq.BodyCipher) Option {
	return optionFunc(func(cfg *config) {
		if c == nil {
			cfg.errs = append(cfg.errs, errors.New("WithStateCipher was given nil"))
			return
		}
		cfg.cipher = c
	})
}

// sealedState is a sealed state as the state column holds it.
type sealedState struct {
	Sealed *struct {
		Key  string `json:"key"`
		Data []byte `json:"data"`
	} `json:"acemq_sealed"`
}

// stateData is what a sealed state is bound to: the saga and the
// instance, each with its length before it.
func (s *Saga[S]) stateData(id string) []byte {
	ad := make([]byte, 0, 8+len(s.name)+len(id))
	for _, f := range []string{"saga", s.name, id} {
		ad = append(append(ad, byte(len(f)>>8), byte(len(f))), f...)
	}
	return ad
}

// encodeState renders v for the state column, sealed when the saga has a
// cipher; env is the envelope of the message whose step saves it.
func (s *Saga[S]) encodeState(ctx context.Context, env *acemq.Envelope, id string, v S) ([]byte, error) {
	plain, err := json.Marshal(v)
	if err != nil || s.cipher == nil {
		return plain, err
	}
	if env == nil {
		env = &acemq.Envelope{ID: id}
	}
	key, sealed, err := s.cipher.Seal(ctx, env, plain, s.stateData(id))
	if err != nil {
		return nil, fmt.Errorf("sealing it: %w", err)
	}
	var out sealedState
	out.Sealed = &struct {
		Key  string `json:"key"`
		Data []byte `json:"data"`
	}{key, sealed}
	return json.Marshal(out)
}

// decodeState reads the state column into v, opening it when the saga
// has a cipher.
func (s *Saga[S]) decodeState(ctx context.Context, id string, state []byte, v *S) error {
	if s.cipher == nil {
		return json.Unmarshal(state, v)
	}
	var in sealedState
	key, body := "", state
	if json.Unmarshal(state, &in) == nil && in.Sealed != nil {
		key, body = in.Sealed.Key, in.Sealed.Data
		if key == "" {
			return errors.New("the sealed state names no key")
		}
	}
	plain, err := s.cipher.Open(ctx, &acemq.Envelope{ID: id}, key, body, s.stateData(id))
	if err != nil {
		return fmt.Errorf("the state does not open: %w", err)
	}
	return json.Unmarshal(plain, v)
}
