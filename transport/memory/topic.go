package memory

import "strings"

// topicMatch reports whether a topic exchange routes a message with routing
// key key to a binding with binding key pattern, as RabbitMQ decides it.
//
// Both keys are lists of words separated by dots. The empty string is the
// empty list, while "a." is the two words "a" and "". In the pattern the word
// "*" stands for exactly one word and "#" for zero or more words; anywhere
// else those characters are literal ("a*" matches only "a*").
//
// It matches word by word without splitting, so it allocates nothing. A
// mismatch after a "#" lets that "#" swallow one more key word and retries
// from just after it, which is enough because a later "#" can absorb whatever
// an earlier one would have.
func topicMatch(pattern, key string) bool {
	p, k := firstWord(pattern), firstWord(key)
	star, starKey := -1, 0 // position just after the last "#", and where its match ends
	for !atEnd(key, k) {
		if !atEnd(pattern, p) {
			w, next := word(pattern, p)
			if w == "#" {
				star, starKey, p = next, k, next
				continue
			}
			kw, knext := word(key, k)
			if w == "*" || w == kw {
				p, k = next, knext
				continue
			}
		}
		if star < 0 {
			return false
		}
		_, starKey = word(key, starKey)
		p, k = star, starKey
	}
	for !atEnd(pattern, p) {
		w, next := word(pattern, p)
		if w != "#" {
			return false
		}
		p = next
	}
	return true
}

// firstWord is the position of the first word of s: 0, or past the end when s
// is empty and so holds no words at all.
func firstWord(s string) int {
	if s == "" {
		return 1
	}
	return 0
}

// atEnd reports whether position pos is past the last word of s.
func atEnd(s string, pos int) bool { return pos > len(s) }

// word returns the word of s starting at pos and the position of the next one
// (past the end after the last word).
func word(s string, pos int) (string, int) {
	i := strings.IndexByte(s[pos:], '.')
	if i < 0 {
		return s[pos:], len(s) + 1
	}
	return s[pos : pos+i], pos + i + 1
}
