package acemq

import (
	"encoding/json"
	"fmt"
	"mime"
	"strings"
)

// Codec turns payloads into bodies and back. A Conn publishes with one codec
// (JSON unless WithCodec says otherwise) and decodes with whichever of its
// codecs matches a delivery's content type, compared as media types
// (parameters and case do not matter); a delivery with no content type is
// decoded with the publishing codec.
type Codec interface {
	// ContentType is the MIME type the codec writes and reads.
	ContentType() string
	// Encode renders v.
	Encode(v any) ([]byte, error)
	// Decode reads data into v, a pointer.
	Decode(data []byte, v any) error
}

// JSON is the default codec, encoding/json under application/json.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) ContentType() string             { return "application/json" }
func (jsonCodec) Encode(v any) ([]byte, error)    { return json.Marshal(v) }
func (jsonCodec) Decode(data []byte, v any) error { return json.Unmarshal(data, v) }

// Raw is a payload that skips the codec: a Publisher[Raw] sends the bytes as
// they are (content type application/octet-stream unless the ContentType
// option says otherwise, and no Envelope.Type unless TypeName gives one) and
// a Consumer[Raw] receives a delivery's body as it arrived, whatever its
// content type and its type. It is how a proxy forwards and how a
// tool reads a dead-letter or parked queue. The bytes a consumer receives
// belong to the delivery (the memory transport shares them with the queued
// message): copy them before changing them.
type Raw []byte

// rawContentType is the content type of a Raw payload unless told otherwise.
const rawContentType = "application/octet-stream"

// codecSet chooses a codec by media type: lower case, without parameters.
// The empty key holds the Conn's publishing codec, which decodes a delivery
// that names no content type.
type codecSet map[string]Codec

// add registers c under its media type.
func (s codecSet) add(c Codec) { s[mediaType(c.ContentType())] = c }

// decode reads body into v, a pointer, with the codec for contentType; a
// *Raw takes the bytes as they are, whatever the content type. name is
// what v holds, for the error.
func (s codecSet) decode(contentType string, body []byte, v any, name string) error {
	if raw, ok := v.(*Raw); ok {
		*raw = Raw(body)
		return nil
	}
	codec, err := s.lookup(contentType)
	if err != nil {
		return err
	}
	if err := codec.Decode(body, v); err != nil {
		return fmt.Errorf("the body does not decode as %s into %s: %w", codec.ContentType(), name, err)
	}
	return nil
}

// lookup finds the codec for a content type. Content types are media
// types: "application/json; charset=utf-8" and "Application/JSON" are
// both JSON's. The common case, a content type exactly as a codec writes
// it, costs one map lookup and no parse.
func (s codecSet) lookup(contentType string) (Codec, error) {
	if c, ok := s[contentType]; ok {
		return c, nil
	}
	if c, ok := s[mediaType(contentType)]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("no codec for content type %q", contentType)
}

// mediaType is contentType's media type, lower case and without
// parameters; a content type that does not parse is lowered and cut at its
// first ';'.
func mediaType(contentType string) string {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil {
		return mt
	}
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}
