package objects

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// crockford is Crockford's base32 alphabet in lower case. Its characters are
// in ASCII order, so ids sort as text in the order they were made.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// IDLen is the length of every id made by NewID.
const IDLen = 26

var idClock struct {
	sync.Mutex
	last int64
}

// NewID returns a new id: 26 characters encoding 56 bits of creation time in
// microseconds, strictly increasing within this process, followed by 72
// random bits. Ids are unique, sort by creation, and cannot be guessed from
// one another.
func NewID() string {
	idClock.Lock()
	us := time.Now().UnixMicro()
	if us <= idClock.last {
		us = idClock.last + 1
	}
	idClock.last = us
	idClock.Unlock()

	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(us)<<8)
	rand.Read(b[7:]) // crypto/rand.Read never fails.
	return encodeID(b)
}

// encodeID writes 128 bits as 26 base32 characters, most significant first;
// the first character carries the top 3 bits (the top 2 of which are zero
// until the year 4000 and beyond).
func encodeID(b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var out [IDLen]byte
	for i := IDLen - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// ValidID reports whether s has the shape of an id made by NewID. It lets a
// malformed id be refused without asking the store.
func ValidID(s string) bool {
	if len(s) != IDLen || s[0] > '7' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' && c != 'i' && c != 'l' && c != 'o' && c != 'u') {
			return false
		}
	}
	return true
}
