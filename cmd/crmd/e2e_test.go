package main

// End-to-end tests of the built crmd binary, run as a user or a script runs
// it: this file holds the helpers (build, run a command, run a server, send
// requests); the tests are in operator_test.go, auth_test.go and
// durability_test.go. Under -race (race_test.go) the binary is built with
// the race detector too, and a race it reports fails the test.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// processTimeout bounds how long any one step waits for a crmd process: a
// command to finish, a server to listen or to exit. It is an upper bound
// against hangs, never what decides success.
const processTimeout = 90 * time.Second

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// crmdBinary builds the crmd binary the first time a test asks for it and
// returns its path.
func crmdBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "crmd-e2e-")
		if buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "crmd")
		args := []string{"build", "-o", bin, "."}
		if raceEnabled {
			// Under -race the packages are already built for the race
			// detector, and the server's data races show under load.
			args = []string{"build", "-race", "-o", bin, "."}
		}
		cmd := exec.Command("go", args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		buildBin = bin
	})
	if buildErr != nil {
		t.Fatalf("building crmd: %v", buildErr)
	}
	return buildBin
}

// childEnv is the environment of a crmd process: the test's own, without
// any CRMD_ variable that could change what the process does, plus extra.
// A binary built with -race waits a second before it exits unless GORACE
// says otherwise; that wait is dropped.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CRMD_") && !strings.HasPrefix(kv, "GORACE=") {
			env = append(env, kv)
		}
	}
	gorace := "atexit_sleep_ms=0"
	if v := os.Getenv("GORACE"); v != "" {
		gorace = v
		if !strings.Contains(v, "atexit_sleep_ms") {
			gorace += " atexit_sleep_ms=0"
		}
	}
	env = append(env, "GORACE="+gorace)
	return append(env, extra...)
}

// A result is what a finished command did.
type result struct {
	args           []string
	env            []string // the CRMD_ variables set, for messages
	stdout, stderr string
	code           int
}

func (r result) String() string {
	var b strings.Builder
	for _, e := range r.env {
		b.WriteString(e + " ")
	}
	fmt.Fprintf(&b, "crmd %s\nexit status %d\n--- stdout:\n%s--- stderr:\n%s", shellQuote(r.args), r.code, r.stdout, r.stderr)
	return b.String()
}

func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$&;|<>*?()[]{}`!#~") {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// crmd runs the binary with args, in an empty working directory (so that the
// default ./crmd.db is never the repository's), and returns what it did.
func crmd(t testing.TB, args ...string) result {
	t.Helper()
	return crmdEnv(t, nil, args...)
}

// crmdEnv is crmd with extra environment variables ("CRMD_DB=...").
func crmdEnv(t testing.TB, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, crmdBinary(t), args...)
	cmd.Dir = t.TempDir()
	cmd.Env = childEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, env: env, stdout: stdout.String(), stderr: stderr.String()}
	if strings.Contains(r.stderr, raceWarning) {
		t.Errorf("the race detector found a data race in crmd %s:\n%s", shellQuote(args), raceReport(r.stderr))
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("still running after %v, killed:\n%v", processTimeout, r)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("crmd %s: %v", shellQuote(args), err)
	}
	return r
}

// crmdOK runs a command that must succeed, and returns its stdout.
func crmdOK(t testing.TB, args ...string) string {
	t.Helper()
	r := crmd(t, args...)
	if r.code != 0 {
		t.Fatalf("want exit status 0:\n%v", r)
	}
	return r.stdout
}

var (
	idPattern  = regexp.MustCompile(`^[0-9a-z]{26}$`)
	keyPattern = regexp.MustCompile(`^ak_[0-9A-Za-z]{38}$`)
)

// keyRow is one element of crmd key list --json.
type keyRow struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// listKeys runs crmd key list --json for a business.
func listKeys(t testing.TB, dsn, business string) []keyRow {
	t.Helper()
	out := crmdOK(t, "key", "list", "--business", business, "--json", "--db", dsn)
	var rows []keyRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("crmd key list --json: %v\n%s", err, out)
	}
	return rows
}

// keyByPrefix finds the row of key in rows.
func keyByPrefix(t testing.TB, rows []keyRow, key string) keyRow {
	t.Helper()
	var found []keyRow
	for _, r := range rows {
		if r.Prefix != "" && strings.HasPrefix(key, r.Prefix) {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want exactly one key listed whose prefix begins %.11s…, found %d in %+v", key, len(found), rows)
	}
	return found[0]
}

// newKey creates a key for a business with the CLI and returns the key and
// its id.
func newKey(t testing.TB, dsn, business, label string) (key, id string) {
	t.Helper()
	key = strings.TrimSuffix(crmdOK(t, "key", "create", "--business", business, "--name", label, "--db", dsn), "\n")
	if !keyPattern.MatchString(key) {
		t.Fatalf("crmd key create printed %q, not a key", key)
	}
	return key, keyByPrefix(t, listKeys(t, dsn, business), key).ID
}

// newBusiness creates a business and a key for it and returns the key.
func newBusiness(t testing.TB, dsn, name string) (key, keyID string) {
	t.Helper()
	crmdOK(t, "business", "create", name, "--db", dsn)
	return newKey(t, dsn, name, "test")
}

// lockedBuffer collects a process's output and calls onLine for each
// complete line, as the process writes it.
type lockedBuffer struct {
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	onLine  func(line []byte)
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all.Write(p)
	if b.onLine == nil {
		return len(p), nil
	}
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.onLine(b.partial[:i])
		b.partial = b.partial[i+1:]
	}
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.all.String()
}

// A server is a running crmd serve process.
type server struct {
	args      []string
	cmd       *exec.Cmd
	stdout    lockedBuffer
	stderr    lockedBuffer
	listening chan string   // the address, once logged
	exited    chan struct{} // closed when the process has exited
	base      string        // http://ADDR
	client    *http.Client
}

// spawnServer starts crmd serve on dsn without waiting for it to listen;
// waitListening does. The process is killed when the test ends, if it still
// runs.
func spawnServer(t testing.TB, dsn string, extra ...string) *server {
	t.Helper()
	s := &server{
		args:      append([]string{"serve", "--addr", "127.0.0.1:0", "--db", dsn, "--log-format", "json"}, extra...),
		listening: make(chan string, 1),
		exited:    make(chan struct{}),
	}
	sent := false
	s.stderr.onLine = func(line []byte) {
		if sent || !bytes.Contains(line, []byte(`"listening"`)) {
			return
		}
		var l struct{ Msg, Addr string }
		if json.Unmarshal(line, &l) == nil && l.Msg == "listening" && l.Addr != "" {
			sent = true
			s.listening <- l.Addr
		}
	}
	s.cmd = exec.Command(crmdBinary(t), s.args...)
	s.cmd.Dir = t.TempDir()
	s.cmd.Env = childEnv()
	s.cmd.Stdout, s.cmd.Stderr = &s.stdout, &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting crmd %s: %v", shellQuote(s.args), err)
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-s.exited:
		default:
			s.cmd.Process.Kill()
			<-s.exited
		}
		if s.client != nil {
			s.client.CloseIdleConnections()
		}
		if log := s.stderr.String(); strings.Contains(log, raceWarning) {
			t.Errorf("the race detector found a data race in crmd %s:\n%s", shellQuote(s.args), raceReport(log))
		} else if t.Failed() {
			t.Logf("log of crmd %s (last lines):\n%s", shellQuote(s.args), tail(log, 40))
		}
	})
	return s
}

// waitListening waits until the server logs that it listens.
func (s *server) waitListening(t testing.TB) {
	t.Helper()
	select {
	case addr := <-s.listening:
		s.base = "http://" + addr
		s.client = &http.Client{
			Timeout:   processTimeout,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
		}
	case <-s.exited:
		t.Fatalf("crmd %s exited (%v) before listening:\n%s", shellQuote(s.args), s.cmd.ProcessState, s.stderr.String())
	case <-time.After(processTimeout):
		t.Fatalf("crmd %s did not log that it listens within %v:\n%s", shellQuote(s.args), processTimeout, s.stderr.String())
	}
}

// startServer starts crmd serve on dsn and waits until it listens.
func startServer(t testing.TB, dsn string, extra ...string) *server {
	t.Helper()
	s := spawnServer(t, dsn, extra...)
	s.waitListening(t)
	return s
}

// signal sends sig to the server and waits for it to exit; it returns the
// exit status (-1 when a signal ended the process).
func (s *server) signal(t testing.TB, sig os.Signal) int {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %v to crmd serve: %v", sig, err)
	}
	select {
	case <-s.exited:
	case <-time.After(processTimeout):
		// SIGQUIT makes the Go runtime print every goroutine's stack: where
		// the process hangs.
		s.cmd.Process.Signal(syscall.SIGQUIT)
		<-s.exited
		t.Fatalf("crmd %s did not exit within %v of %v:\n%s", shellQuote(s.args), processTimeout, sig, goroutines(s.stderr.String()))
	}
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
	return s.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM, waits for the server to exit, and checks that it
// exited with status 0 after logging "stopped".
func (s *server) stop(t testing.TB) {
	t.Helper()
	if code := s.signal(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("crmd serve exited with status %d after SIGTERM, want 0:\n%s", code, tail(s.stderr.String(), 40))
	}
	if !s.logged("stopped") {
		t.Fatalf("crmd serve exited after SIGTERM without logging \"stopped\":\n%s", tail(s.stderr.String(), 40))
	}
}

// goroutines returns the goroutine dump of a process that SIGQUIT ended,
// or the last lines of its log when there is none.
func goroutines(log string) string {
	if i := strings.Index(log, "SIGQUIT: quit"); i >= 0 {
		return log[i:]
	}
	return tail(log, 40)
}

// kill ends the server with SIGKILL and waits for it to be gone.
func (s *server) kill(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGKILL)
}

// logMessages returns the msg of every JSON line the server has logged.
func (s *server) logMessages() []string {
	var msgs []string
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		var l struct{ Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg != "" {
			msgs = append(msgs, l.Msg)
		}
	}
	return msgs
}

// logged reports whether the server has logged a line with exactly msg.
func (s *server) logged(msg string) bool {
	for _, m := range s.logMessages() {
		if m == msg {
			return true
		}
	}
	return false
}

// raceWarning starts a report of the race detector.
const raceWarning = "WARNING: DATA RACE"

// raceReport returns the race detector's reports in a process's stderr.
func raceReport(log string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.SplitAfter(log, "\n") {
		if strings.HasPrefix(line, raceWarning) {
			in = true
		}
		if in {
			b.WriteString(line)
		}
		if strings.HasPrefix(line, "==================") && b.Len() > len(line) {
			in = false
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[… %d lines before]\n", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "")
}

// A response is an HTTP answer, read in full.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) String() string {
	return fmt.Sprintf("%d %s %s", r.status, r.header.Get("Content-Type"), r.body)
}

// A bodyError is an answer whose status came but whose body was cut off.
type bodyError struct {
	status int
	err    error
}

func (e *bodyError) Error() string {
	return fmt.Sprintf("status %d, then reading the body: %v", e.status, e.err)
}

func (e *bodyError) Unwrap() error { return e.err }

// bearer and xAPIKey are the two ways of sending a key.
func bearer(key string) http.Header  { return http.Header{"Authorization": {"Bearer " + key}} }
func xAPIKey(key string) http.Header { return http.Header{"X-Api-Key": {key}} }

// send makes a request and reads the whole answer. A body is sent as
// application/json. It does not fail the test, so goroutines may use it.
func (s *server) send(method, path string, h http.Header, body string) (*response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &bodyError{status: resp.StatusCode, err: err}
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// mustSend is send for the test goroutine: a transport error fails the test,
// and so does a status other than want.
func (s *server) mustSend(t testing.TB, want int, method, path string, h http.Header, body string) *response {
	t.Helper()
	r, err := s.send(method, path, h, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if r.status != want {
		t.Fatalf("%s %s %s: got %v, want status %d", method, path, body, r, want)
	}
	return r
}

// recordID returns the id of a record answered in r.
func recordID(t testing.TB, r *response) string {
	t.Helper()
	var rec struct{ ID string }
	if err := json.Unmarshal(r.body, &rec); err != nil || !idPattern.MatchString(rec.ID) {
		t.Fatalf("want a record with an id, got %v", r)
	}
	return rec.ID
}
