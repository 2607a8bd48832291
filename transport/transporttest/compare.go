package transporttest

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
)

// unixSecond is a normalised time: whole seconds since the epoch. AMQP
// carries timestamps to the second.
type unixSecond int64

// normalise maps a header value to the form the suite compares, so that the
// changes an AMQP wire makes are not counted as differences:
//
//   - every integer type becomes int64 and every float type float64;
//   - a time.Time becomes its whole seconds, in any location;
//   - any map with string keys (amqp091.Table, say) becomes map[string]any,
//     and any slice but []byte becomes []any, their elements normalised;
//   - a nil map or slice is the same as an empty one.
//
// Strings, bools and []byte must come back as they are.
func normalise(v any) any {
	switch x := v.(type) {
	case nil, string, bool:
		return x
	case []byte:
		if len(x) == 0 {
			return []byte{}
		}
		return x
	case time.Time:
		return unixSecond(x.Unix())
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return int64(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return rv.Float()
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return v
		}
		out := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			out[it.Key().String()] = normalise(it.Value().Interface())
		}
		return out
	case reflect.Slice, reflect.Array:
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = normalise(rv.Index(i).Interface())
		}
		return out
	}
	return v
}

// diffHeaders describes how got differs from want after normalisation, or
// returns "" when they agree.
func diffHeaders(want, got map[string]any) string {
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var diff bytes.Buffer
	for _, k := range slices.Compact(keys) {
		w, wok := want[k]
		g, gok := got[k]
		switch {
		case !gok:
			fmt.Fprintf(&diff, "\n\theader %q is missing (want %#v)", k, w)
		case !wok:
			fmt.Fprintf(&diff, "\n\theader %q was not sent but arrived as %#v", k, g)
		case !reflect.DeepEqual(normalise(w), normalise(g)):
			fmt.Fprintf(&diff, "\n\theader %q: want %#v (%T), got %#v (%T)", k, w, w, g, g)
		}
	}
	return diff.String()
}

// checkMessage fails t unless got carries every field of want, with headers
// compared after normalise and Timestamp to the second.
func checkMessage(t *testing.T, want, got transport.Message) {
	t.Helper()
	var diff bytes.Buffer
	field := func(name string, w, g any) {
		if !reflect.DeepEqual(w, g) {
			fmt.Fprintf(&diff, "\n\t%s: want %#v, got %#v", name, w, g)
		}
	}
	field("Exchange", want.Exchange, got.Exchange)
	field("RoutingKey", want.RoutingKey, got.RoutingKey)
	field("ContentType", want.ContentType, got.ContentType)
	field("MessageID", want.MessageID, got.MessageID)
	field("CorrelationID", want.CorrelationID, got.CorrelationID)
	field("Type", want.Type, got.Type)
	field("AppID", want.AppID, got.AppID)
	field("ReplyTo", want.ReplyTo, got.ReplyTo)
	if want.Timestamp.Unix() != got.Timestamp.Unix() || want.Timestamp.IsZero() != got.Timestamp.IsZero() {
		fmt.Fprintf(&diff, "\n\tTimestamp: want %v, got %v (compared to the second)", want.Timestamp, got.Timestamp)
	}
	if !bytes.Equal(want.Body, got.Body) {
		fmt.Fprintf(&diff, "\n\tBody: want %q, got %q", want.Body, got.Body)
	}
	diff.WriteString(diffHeaders(want.Headers, got.Headers))
	if diff.Len() > 0 {
		t.Errorf("the delivered message differs from the published one:%s", diff.String())
	}
}
