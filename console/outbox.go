package console

import (
	"errors"
	"net/http"

	"github.com/acemq/acemq/outbox"
)

// maxOutboxRows bounds the dead rows listed.
const maxOutboxRows = 100

// Outbox shows the dead-lettered rows of o, the rows its relay gave up
// on, and (with Write) puts them back to be relayed with o.Replay or
// o.ReplayAll, as acemq outbox replay does. Without it the console has no
// outbox section.
func Outbox(o *outbox.Outbox) Option {
	return optionFunc(func(c *config) { c.outbox = o })
}

type outboxReply struct {
	Configured bool             `json:"configured"`
	Table      string           `json:"table,omitempty"`
	Dead       int64            `json:"dead"`
	Rows       []outbox.DeadRow `json:"rows"`
}

func (c *console) outboxRows(w http.ResponseWriter, r *http.Request) {
	o := c.cfg.outbox
	if o == nil {
		reply(w, outboxReply{Rows: []outbox.DeadRow{}})
		return
	}
	n, err := o.Dead(r.Context())
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	rows, err := o.DeadRows(r.Context(), maxOutboxRows)
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	if rows == nil {
		rows = []outbox.DeadRow{}
	}
	reply(w, outboxReply{Configured: true, Table: o.TableName(), Dead: n, Rows: rows})
}

type outboxReplayRequest struct {
	IDs []int64 `json:"ids"`
	All bool    `json:"all"`
}

// outboxReplay puts dead rows back for the relay.
func (c *console) outboxReplay(w http.ResponseWriter, r *http.Request) {
	o := c.cfg.outbox
	if o == nil {
		fail(w, http.StatusNotFound, errors.New("acemq: console: no outbox is configured (console.Outbox, or acemq console -outbox-db)"))
		return
	}
	var req outboxReplayRequest
	if err := decodeBody(r, &req); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	var n int64
	var err error
	switch {
	case req.All == (len(req.IDs) > 0):
		fail(w, http.StatusBadRequest, errors.New("acemq: console: outbox replay: name the row IDs or say all, not both"))
		return
	case req.All:
		n, err = o.ReplayAll(r.Context())
	default:
		n, err = o.Replay(r.Context(), req.IDs...)
	}
	if err != nil {
		fail(w, http.StatusBadGateway, err)
		return
	}
	c.cfg.logger.Info("acemq: console: outbox replay", "who", c.who(r), "table", o.TableName(), "ids", req.IDs, "all", req.All, "revived", n)
	reply(w, map[string]any{"revived": n})
}
