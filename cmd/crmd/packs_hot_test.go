package main

// Rule packs applied while crmd serves: by the CLI, by crmd serve --packs
// watching a directory, on two servers sharing a PostgreSQL database, and
// under load.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// leadRule is a pack with one validation: a web lead needs an email, with
// msg as the refusal's message.
func leadRule(msg string) string {
	return fmt.Sprintf(`pack: leads
validations:
  - name: web leads give an email
    object: leads
    when: record.source == "web" && blank("email")
    error: %q
    field: email
`, msg)
}

// brokenLeadRule is leadRule with a misspelt field: it does not compile.
func brokenLeadRule(msg string) string {
	return strings.Replace(leadRule(msg), `blank("email")`, `record.emial == ""`, 1)
}

// webLead is a lead that leadRule refuses.
const webLead = `{"first_name":"Bob","source":"web"}`

// waitEnforced waits until s refuses webLead with msg, and returns how long
// that took after start.
func waitEnforced(t testing.TB, s *server, h http.Header, start time.Time, msg string) time.Duration {
	t.Helper()
	return waitFor(t, start, "the server refusing a web lead with "+msg, func() (bool, string) {
		return refusedBy(s, "POST", "/api/v1/leads", h, webLead, msg, "email")
	})
}

// TestPackHotActivation applies packs with the CLI while a server runs: the
// server enforces a new revision without a restart, and a revision that
// does not compile changes nothing.
func TestPackHotActivation(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		h := bearer(key)
		s := startServer(t, dsn)
		// Before any pack, the server takes the lead.
		s.mustSend(t, 201, "POST", "/api/v1/leads", h, webLead)

		dir := t.TempDir()
		file := filepath.Join(dir, "leads.yaml")
		const msg = "a web lead needs an email address"
		writeFile(t, file, leadRule(msg))
		r := packCmd(t, "apply", dsn, "Acme", dir)
		exited := time.Now()
		wantStdout(t, r, 0, "leads: revision 1 active\n")
		took := waitEnforced(t, s, h, exited, msg)
		t.Logf("%s: the server enforced revision 1 %v after crmd pack apply exited", kind, took.Round(time.Millisecond))
		// A lead that passes the rule is still taken.
		s.mustSend(t, 201, "POST", "/api/v1/leads", h, `{"first_name":"Ann","source":"web","email":"ann@example.com"}`)

		// A revision that does not compile is refused whole and changes
		// nothing: no revision is stored and the server keeps revision 1.
		writeFile(t, file, brokenLeadRule("a new message"))
		r = packCmd(t, "apply", dsn, "Acme", dir)
		wantFailure(t, r, 1, file+":5:", "unknown field emial", "nothing was changed")
		wantRevisions(t, listPacks(t, dsn, "Acme"), "leads", 1, 1)
		// For more than two poll intervals, every answer is revision 1's.
		refused := time.Now()
		for time.Since(refused) < 1200*time.Millisecond {
			if ok, got := refusedBy(s, "POST", "/api/v1/leads", h, webLead, msg, "email"); !ok {
				t.Fatalf("%v after a refused apply the server no longer enforces revision 1: %s", time.Since(refused), got)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if log := s.stderr.String(); strings.Contains(log, "leads@2") {
			t.Errorf("the server activated a revision 2 that was refused:\n%s", log)
		}
		s.stop(t)
	})
}

// TestPackWatch runs crmd serve --packs DIR --business NAME: the pack in
// DIR is applied at start and on every change; a broken change is logged
// and the last good revision keeps serving.
func TestPackWatch(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		h := bearer(key)
		dir := t.TempDir()
		file := filepath.Join(dir, "leads.yaml")
		writeFile(t, file, leadRule("first: a web lead needs an email"))
		started := time.Now()
		s := startServer(t, dsn, "--packs", dir, "--business", "Acme")
		waitEnforced(t, s, h, started, "first: a web lead needs an email")
		rows := listPacks(t, dsn, "Acme")
		wantRevisions(t, rows, "leads", 1, 1)
		if want := "crmd serve --packs " + dir; rows[0].CreatedBy != want {
			t.Errorf("revision 1 is by %q, want %q", rows[0].CreatedBy, want)
		}

		// An edit makes a new revision active.
		writeFile(t, file, leadRule("second: give an email with every web lead"))
		edited := time.Now()
		took := waitEnforced(t, s, h, edited, "second: give an email with every web lead")
		t.Logf("%s: the server enforced the edited pack %v after the edit", kind, took.Round(time.Millisecond))
		wantRevisions(t, listPacks(t, dsn, "Acme"), "leads", 2, 2)

		// A broken edit is logged, and the last good revision keeps serving.
		writeFile(t, file, brokenLeadRule("third"))
		edited = time.Now()
		var refusal string
		waitFor(t, edited, "the server logging the broken pack", func() (bool, string) {
			refusals := 0
			for _, line := range strings.Split(s.stderr.String(), "\n") {
				var l struct{ Msg, Errors string }
				if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "rule pack refused; the last good revision keeps serving" {
					refusal = l.Errors
					refusals++
				}
			}
			if refusals > 1 {
				t.Fatalf("the server refused %d packs, want 1:\n%s", refusals, s.stderr.String())
			}
			return refusals == 1, tail(s.stderr.String(), 5)
		})
		if !strings.Contains(refusal, file+":5:") || !strings.Contains(refusal, "unknown field emial") {
			t.Errorf("the log does not say where the pack is wrong: %q", refusal)
		}
		if ok, got := refusedBy(s, "POST", "/api/v1/leads", h, webLead, "second: give an email with every web lead", "email"); !ok {
			t.Errorf("after a broken edit the server no longer enforces the last good revision: %s", got)
		}
		wantRevisions(t, listPacks(t, dsn, "Acme"), "leads", 2, 2)

		// Fixing the file is picked up again.
		writeFile(t, file, leadRule("fourth: a web lead without an email cannot be called back"))
		waitEnforced(t, s, h, time.Now(), "fourth: a web lead without an email cannot be called back")
		wantRevisions(t, listPacks(t, dsn, "Acme"), "leads", 3, 3)
		s.stop(t)
	})
}

// TestPackHotTwoServers runs two crmd processes on one PostgreSQL database:
// a pack applied with the CLI is enforced by both, without a restart.
func TestPackHotTwoServers(t *testing.T) {
	t.Parallel()
	dsn := storetest.DSN(t, "postgres")
	key, _ := newBusiness(t, dsn, "Acme")
	h := bearer(key)
	servers := []*server{spawnServer(t, dsn), spawnServer(t, dsn)}
	for _, s := range servers {
		s.waitListening(t)
		// Each has served the business, and holds its rules, before the
		// apply: as servers in service do.
		s.mustSend(t, 201, "POST", "/api/v1/leads", h, webLead)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "leads.yaml")
	for rev, msg := range []string{"a web lead needs an email address", "web leads must give an email"} {
		writeFile(t, file, leadRule(msg))
		r := packCmd(t, "apply", dsn, "Acme", dir)
		exited := time.Now()
		wantStdout(t, r, 0, fmt.Sprintf("leads: revision %d active\n", rev+1))
		type outcome struct {
			took time.Duration
			last string
			ok   bool
		}
		outcomes := make([]outcome, len(servers))
		var wg sync.WaitGroup
		for i, s := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := &outcomes[i]
				o.took, o.last, o.ok = pollUntil(exited, activationDeadline, func() (bool, string) {
					return refusedBy(s, "POST", "/api/v1/leads", h, webLead, msg, "email")
				})
			}()
		}
		wg.Wait()
		for i, o := range outcomes {
			if !o.ok {
				t.Fatalf("server %d did not enforce revision %d within %v of crmd pack apply exiting; last: %s", i+1, rev+1, activationDeadline, o.last)
			}
			t.Logf("postgres: server %d enforced revision %d %v after crmd pack apply exited", i+1, rev+1, o.took.Round(time.Millisecond))
		}
	}
	for _, s := range servers {
		s.stop(t)
	}
}

// swapPack is one of two revisions of a pack that differ only in rules that
// never refuse the load's leads: each refuses its own probe, and each stamps
// the load's leads with its name, in two fields, so that a lead shows which
// revision wrote it, and that it saw one whole revision.
func swapPack(name string) string {
	return fmt.Sprintf(`pack: swap
validations:
  - name: refuse probe %[1]s
    object: leads
    when: record.source == "probe-%[1]s"
    error: revision %[1]s refuses probe-%[1]s
    field: source
automations:
  - name: stamp %[1]s
    object: leads
    on: create
    when: record.source == "load"
    actions:
      - set: {rating: %[1]s, status: %[1]s}
`, name)
}

// TestPackSwapUnderLoad applies two revisions in turn, ten times, with the
// CLI, while eight clients create leads as fast as the server answers:
// every request succeeds, and every lead was written under one whole
// revision.
func TestPackSwapUnderLoad(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		key, _ := newBusiness(t, dsn, "Acme")
		h := bearer(key)
		s := startServer(t, dsn)
		dir := t.TempDir()
		file := filepath.Join(dir, "swap.yaml")

		// probe waits until the server runs revision name: its probe is
		// refused, the other's is not (dry runs, so probes store nothing).
		probe := func(name, other string) time.Duration {
			return waitFor(t, time.Now(), "the server running revision "+name, func() (bool, string) {
				ok, got := refusedBy(s, "POST", "/api/v1/leads?dry_run=true", h, `{"source":"probe-`+name+`"}`, "revision "+name+" refuses probe-"+name, "source")
				if !ok {
					return false, got
				}
				r, err := s.send("POST", "/api/v1/leads?dry_run=true", h, `{"source":"probe-`+other+`"}`)
				if err != nil {
					return false, err.Error()
				}
				return r.status == 200, r.String()
			})
		}
		writeFile(t, file, swapPack("a"))
		wantStdout(t, packCmd(t, "apply", dsn, "Acme", dir), 0, "swap: revision 1 active\n")
		probe("a", "b")

		const clients = 8
		var (
			stop              = make(chan struct{})
			wg                sync.WaitGroup
			ok, failed, mixed atomic.Int64
			mu                sync.Mutex
			failures          []string
		)
		fail := func(counter *atomic.Int64, msg string) {
			counter.Add(1)
			mu.Lock()
			defer mu.Unlock()
			if len(failures) < 10 {
				failures = append(failures, msg)
			}
		}
		// The clients stop however the test ends.
		stopClients := sync.OnceFunc(func() {
			close(stop)
			wg.Wait()
		})
		defer stopClients()
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf(`{"first_name":"Load %d","source":"load","email":"load%d@example.com"}`, c, c)
				for {
					select {
					case <-stop:
						return
					default:
					}
					r, err := s.send("POST", "/api/v1/leads", h, body)
					switch {
					case err != nil:
						fail(&failed, err.Error())
					case r.status != 201:
						fail(&failed, r.String())
					default:
						var rec struct{ Rating, Status string }
						json.Unmarshal(r.body, &rec)
						if rec.Rating != rec.Status || (rec.Rating != "a" && rec.Rating != "b") {
							fail(&mixed, "a lead stamped with parts of two revisions: "+string(r.body))
						} else {
							ok.Add(1)
						}
					}
				}
			}()
		}
		start := time.Now()
		var delays []time.Duration
		for i := range 10 {
			name, other := "b", "a"
			if i%2 == 1 {
				name, other = "a", "b"
			}
			writeFile(t, file, swapPack(name))
			r := packCmd(t, "apply", dsn, "Acme", dir)
			if r.code != 0 || r.stdout != fmt.Sprintf("swap: revision %d active\n", i+2) {
				t.Fatalf("swap %d: want revision %d active:\n%v", i+1, i+2, r)
			}
			exited := time.Now()
			probe(name, other)
			delays = append(delays, time.Since(exited).Round(time.Millisecond))
		}
		stopClients()
		elapsed := time.Since(start)
		t.Logf("%s: %d clients, 10 swaps in %v: %d leads created, %d failed, %d mixed; each swap enforced after %v",
			kind, clients, elapsed.Round(time.Millisecond), ok.Load(), failed.Load(), mixed.Load(), delays)
		if failed.Load() > 0 || mixed.Load() > 0 {
			t.Fatalf("%d requests failed and %d leads mixed two revisions across the swaps; the first:\n%s",
				failed.Load(), mixed.Load(), strings.Join(failures, "\n"))
		}
		if ok.Load() == 0 {
			t.Fatal("no request was made during the swaps")
		}
		s.stop(t)
	})
}
