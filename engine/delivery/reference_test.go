package delivery

import (
	"net/http"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestAgainstTheReferenceLibrary checks signatures both ways against the
// Go library of the Standard Webhooks project: it verifies what crmd signs,
// and crmd verifies what it signs.
func TestAgainstTheReferenceLibrary(t *testing.T) {
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{}`, `{"type":"deals.updated","data":{"record":{"name":"Ünïcode ✓"}}}`, ""} {
		now := time.Now()
		h := http.Header{}
		if err := SetHeaders(h, secret, "msg_06c3cs0a2b216t30fbxk32z6x2", now, []byte(body)); err != nil {
			t.Fatal(err)
		}
		if err := ref.Verify([]byte(body), h); err != nil {
			t.Errorf("the reference library refuses crmd's signature of %q: %v", body, err)
		}
		sig, err := ref.Sign("msg_2", now, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		h2 := http.Header{"Webhook-Id": {"msg_2"}, "Webhook-Timestamp": {h.Get("webhook-timestamp")}, "Webhook-Signature": {sig}}
		if err := Verify(secret, h2, []byte(body), now); err != nil {
			t.Errorf("crmd refuses the reference library's signature of %q: %v", body, err)
		}
	}
}
