// Package delivery holds what sending webhooks safely takes, apart from the
// store: Standard Webhooks signatures (and their verification, for inbound
// webhooks), the SSRF policy checked when a connection is made, one attempt
// with quick retries by go-retryablehttp, and the durable retry schedule.
package delivery

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// secretPrefix starts every secret, as the Standard Webhooks scheme has it.
const secretPrefix = "whsec_"

// NewSecret returns a new signing secret: whsec_ and the base64 of 32
// random bytes.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b[:]), nil
}

// secretKey returns the HMAC key of a secret: the bytes its base64 holds.
func secretKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil {
		return nil, errors.New("the secret is not whsec_ and base64")
	}
	return key, nil
}

// Sign returns the webhook-signature of a message: v1, and the base64 of
// the HMAC-SHA256 of "id.timestamp.body".
func Sign(secret, msgID string, ts time.Time, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, msgID, ts.Unix(), body)), nil
}

func mac(key []byte, msgID string, ts int64, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msgID))
	h.Write([]byte{'.'})
	h.Write([]byte(strconv.FormatInt(ts, 10)))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// SetHeaders sets the three Standard Webhooks headers of a message.
func SetHeaders(h http.Header, secret, msgID string, ts time.Time, body []byte) error {
	sig, err := Sign(secret, msgID, ts, body)
	if err != nil {
		return err
	}
	h.Set("webhook-id", msgID)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return nil
}

// Tolerance is how far a signed request's timestamp may be from now.
const Tolerance = 5 * time.Minute

// Verify checks a request's Standard Webhooks signature: any of the v1
// signatures listed in webhook-signature must match, and its timestamp must
// be within Tolerance of now.
func Verify(secret string, h http.Header, body []byte, now time.Time) error {
	id, tsText, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || tsText == "" || sigs == "" {
		return errors.New("webhook-id, webhook-timestamp and webhook-signature are required")
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return errors.New("webhook-timestamp is not a number of seconds")
	}
	if d := now.Sub(time.Unix(ts, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("webhook-timestamp is more than %s away from now", Tolerance)
	}
	key, err := secretKey(secret)
	if err != nil {
		return err
	}
	want := mac(key, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errors.New("no signature matches")
}

// VerifyHMAC checks a header holding the hex HMAC-SHA256 of the body, keyed
// with the secret as written, optionally after "sha256=" (as GitHub sends).
func VerifyHMAC(secret, header string, body []byte) error {
	if header == "" {
		return errors.New("the signature header is missing")
	}
	got, err := hex.DecodeString(strings.TrimPrefix(strings.TrimSpace(header), "sha256="))
	if err != nil {
		return errors.New("the signature is not hex")
	}
	h := hmac.New(sha256.New, []byte(secret))
	h.Write(body)
	if !hmac.Equal(got, h.Sum(nil)) {
		return errors.New("the signature does not match")
	}
	return nil
}
