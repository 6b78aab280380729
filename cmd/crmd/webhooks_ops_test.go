package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// TestWebhookOperatorCommands drives the webhook commands of the built
// binary against a running server: an operator disables a webhook, its
// deliveries wait while another webhook's go out, the list shows why, and
// enabling it sends what waited; replay sends a delivery again.
func TestWebhookOperatorCommands(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")

		var mu sync.Mutex
		got := map[string][]string{} // path → webhook-ids
		arrived := make(chan struct{}, 100)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("webhook-id"))
			mu.Unlock()
			arrived <- struct{}{}
		}))
		defer recv.Close()
		waitFor := func(path string, n int) []string {
			t.Helper()
			deadline := time.After(processTimeout) // a guard against hangs
			for {
				mu.Lock()
				ids := append([]string(nil), got[path]...)
				mu.Unlock()
				if len(ids) >= n {
					return ids
				}
				select {
				case <-arrived:
				case <-deadline:
					t.Fatalf("%d deliveries at %s, want %d", len(ids), path, n)
				}
			}
		}

		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "hooks.yaml"), fmt.Sprintf(`pack: hooks
webhooks:
  - name: crm-sync
    url: %[1]s/sync
    events: [leads.created]
  - name: audit
    url: %[1]s/audit
    events: [leads.created]
`, recv.URL))
		packCmd(t, "apply", dsn, "Acme", dir)
		s := startServer(t, dsn, "--webhook-allow", "127.0.0.0/8")

		r := crmd(t, "webhook", "disable", "--business", "Acme", "--reason", "receiver under maintenance", "crm-sync", "--db", dsn)
		if r.code != 0 || !strings.Contains(r.stderr, "webhook crm-sync is disabled") {
			t.Fatalf("webhook disable:\n%v", r)
		}
		if r := crmd(t, "webhook", "disable", "--business", "Acme", "nosuch", "--db", dsn); r.code != 1 ||
			!strings.Contains(r.stderr, `business "Acme" has no webhook nosuch`) {
			t.Errorf("disabling an unknown webhook:\n%v", r)
		}
		for i := range 3 {
			s.mustSend(t, http.StatusCreated, "POST", "/api/v1/leads", bearer(key), fmt.Sprintf(`{"first_name":"Lead %d"}`, i))
		}
		// The audit webhook's deliveries were queued with crm-sync's and
		// are due at the same time: once they are in, the dispatcher has
		// had its chance at crm-sync's too.
		waitFor("/audit", 3)

		var hooks []struct {
			Name, State    string
			DisabledReason string `json:"disabled_reason"`
		}
		if err := json.Unmarshal([]byte(crmdOK(t, "webhook", "list", "--business", "Acme", "--json", "--db", dsn)), &hooks); err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		for _, h := range hooks {
			states[h.Name] = h.State + " " + h.DisabledReason
		}
		if states["crm-sync"] != "disabled receiver under maintenance" || states["audit"] != "enabled " {
			t.Errorf("webhook list states: %q", states)
		}
		var pending []struct{ ID, Webhook string }
		if err := json.Unmarshal([]byte(crmdOK(t, "webhook", "deliveries", "--business", "Acme", "--status", "pending", "--json", "--db", dsn)), &pending); err != nil {
			t.Fatal(err)
		}
		if len(pending) != 3 {
			t.Fatalf("%d pending deliveries while crm-sync is disabled, want its 3: %+v", len(pending), pending)
		}
		for _, d := range pending {
			if d.Webhook != "crm-sync" {
				t.Errorf("pending delivery %s of %s, want crm-sync", d.ID, d.Webhook)
			}
		}
		mu.Lock()
		if n := len(got["/sync"]); n != 0 {
			t.Errorf("the disabled webhook received %d deliveries", n)
		}
		mu.Unlock()

		crmdOK(t, "webhook", "enable", "--business", "Acme", "crm-sync", "--db", dsn)
		ids := waitFor("/sync", 3)

		// Replay sends one again, with the same webhook-id.
		crmdOK(t, "webhook", "replay", "--business", "Acme", pending[0].ID, "--db", dsn)
		ids = waitFor("/sync", 4)
		if ids[3] != "msg_"+pending[0].ID {
			t.Errorf("the replay came as %s, want msg_%s (of %v)", ids[3], pending[0].ID, ids)
		}
		s.stop(t)
	})
}

// TestInboundTokenShownOnce: the URL of an inbound webhook is printed by
// the pack apply that makes it, and by a rotation, and nowhere else: the
// list shows its start, a later apply nothing, and the server's log never
// the token.
func TestInboundTokenShownOnce(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		newBusiness(t, dsn, "Acme")
		dir := t.TempDir()
		pack := `pack: forms
inbound:
  - name: web-form
    object: leads
    mapping:
      email: = payload.email
`
		writeFile(t, filepath.Join(dir, "forms.yaml"), pack)
		r := packCmd(t, "apply", dsn, "Acme", dir)
		m := regexp.MustCompile(`^forms: revision 1 active\ninbound webhook web-form: (/api/in/in_[0-9A-Za-z]{32})\n$`).FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil || !strings.Contains(r.stderr, "shown this once") {
			t.Fatalf("pack apply:\n%v", r)
		}
		path := m[1]
		token := strings.TrimPrefix(path, "/api/in/")

		s := startServer(t, dsn)
		s.mustSend(t, http.StatusCreated, "POST", path, nil, `{"email":"ada@example.com"}`)

		list := crmdOK(t, "inbound", "list", "--business", "Acme", "--db", dsn)
		if strings.Contains(list, token) || !strings.Contains(list, "/api/in/"+token[:7]+"…") {
			t.Errorf("inbound list shows the token, or not its start %s:\n%s", token[:7], list)
		}
		writeFile(t, filepath.Join(dir, "forms.yaml"), pack+"# a new revision\n")
		if r := packCmd(t, "apply", dsn, "Acme", dir); strings.Contains(r.stdout, "/api/in/") {
			t.Errorf("a later apply printed a URL again:\n%v", r)
		}

		rotated := strings.TrimSpace(crmdOK(t, "inbound", "rotate", "--business", "Acme", "web-form", "--db", dsn))
		if !strings.HasPrefix(rotated, "/api/in/in_") || rotated == path {
			t.Fatalf("rotate printed %q", rotated)
		}
		s.mustSend(t, http.StatusNotFound, "POST", path, nil, `{"email":"eve@example.com"}`)
		s.mustSend(t, http.StatusCreated, "POST", rotated, nil, `{"email":"eve@example.com"}`)
		s.stop(t)
		for _, tok := range []string{token, strings.TrimPrefix(rotated, "/api/in/")} {
			if strings.Contains(s.stderr.String(), tok) {
				t.Errorf("the server logged an inbound token")
			}
		}
	})
}
