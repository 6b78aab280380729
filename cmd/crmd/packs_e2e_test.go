package main

// End-to-end tests of rule packs with the built binary: crmd pack validate,
// test, apply, list, show and rollback as an operator runs them. The tests
// of packs applied to running servers are in packs_hot_test.go, those of
// dropped objects and fields in packs_drop_test.go, and the dry runs in
// packs_dryrun_test.go. The helpers here serve them all; the general ones
// (building crmd, running it, servers) are in e2e_test.go.

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crmd/crmd/objects/storetest"
)

// examplePack is the absolute path of the example pack: crmd runs in a
// directory of its own, so relative paths would not reach it.
func examplePack(t testing.TB) string {
	t.Helper()
	return absPath(t, filepath.Join("..", "..", "examples", "field-services"))
}

// testPack is the absolute path of a pack under testdata/packs.
func testPack(t testing.TB, name string) string {
	t.Helper()
	return absPath(t, filepath.Join("testdata", "packs", name))
}

func absPath(t testing.TB, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatal(err)
	}
	return abs
}

// writeFile replaces the file at path with content in one step (a new file
// renamed over it), so that a process watching the directory never reads
// half of it.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// packCmd runs crmd pack SUB --business business --db dsn ARGS....
func packCmd(t testing.TB, sub, dsn, business string, args ...string) result {
	t.Helper()
	return crmd(t, append([]string{"pack", sub, "--business", business, "--db", dsn}, args...)...)
}

// wantStdout checks that a command exited with code and printed exactly
// stdout.
func wantStdout(t testing.TB, r result, code int, stdout string) {
	t.Helper()
	if r.code != code || r.stdout != stdout {
		t.Fatalf("want exit status %d and stdout %q:\n%v", code, stdout, r)
	}
}

// wantFailure checks that a command exited with code, printed nothing on
// stdout, and said each of msgs on stderr.
func wantFailure(t testing.TB, r result, code int, msgs ...string) {
	t.Helper()
	if r.code != code || r.stdout != "" {
		t.Fatalf("want exit status %d and nothing on stdout:\n%v", code, r)
	}
	for _, m := range msgs {
		if !strings.Contains(r.stderr, m) {
			t.Fatalf("want stderr to say %q:\n%v", m, r)
		}
	}
}

// packRow is one element of crmd pack list --json.
type packRow struct {
	Pack      string    `json:"pack"`
	Revision  int       `json:"revision"`
	Active    bool      `json:"active"`
	Hash      string    `json:"hash"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
}

// listPacks runs crmd pack list --json.
func listPacks(t testing.TB, dsn, business string) []packRow {
	t.Helper()
	r := packCmd(t, "list", dsn, business, "--json")
	if r.code != 0 {
		t.Fatalf("want exit status 0:\n%v", r)
	}
	var rows []packRow
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("crmd pack list --json: %v\n%s", err, r.stdout)
	}
	return rows
}

// wantRevisions checks that pack has exactly the revisions 1..n stored,
// with active the active one.
func wantRevisions(t testing.TB, rows []packRow, pack string, n, active int) {
	t.Helper()
	var revs []int
	for _, r := range rows {
		if r.Pack != pack {
			continue
		}
		revs = append(revs, r.Revision)
		if r.Active != (r.Revision == active) {
			t.Fatalf("pack %s revision %d: active = %v, want revision %d alone active: %+v", pack, r.Revision, r.Active, active, rows)
		}
	}
	slices.Sort(revs)
	want := make([]int, n)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(revs, want) {
		t.Fatalf("pack %s has revisions %v, want %v: %+v", pack, revs, want, rows)
	}
}

// An apiError is the error body of an answer.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field"`
	Code  string `json:"code"`
}

func decodeError(r *response) apiError {
	var e apiError
	json.Unmarshal(r.body, &e)
	return e
}

// pollEvery is how often tests ask a server whether it has done something
// yet; activationDeadline is how long they wait, far more than the second
// the issue allows, so that a slow machine does not fail them.
const (
	pollEvery          = 10 * time.Millisecond
	activationDeadline = 10 * time.Second
)

// pollUntil calls check every pollEvery until it reports done or deadline
// has passed since start. It returns how long after start check first
// reported done, and the last note check gave. It does not touch a
// testing.T, so that goroutines may use it.
func pollUntil(start time.Time, deadline time.Duration, check func() (done bool, note string)) (time.Duration, string, bool) {
	for {
		done, note := check()
		if done {
			return time.Since(start), note, true
		}
		if time.Since(start) > deadline {
			return time.Since(start), note, false
		}
		time.Sleep(pollEvery)
	}
}

// waitFor is pollUntil for the test goroutine: it fails the test when the
// deadline passes.
func waitFor(t testing.TB, start time.Time, what string, check func() (bool, string)) time.Duration {
	t.Helper()
	took, note, ok := pollUntil(start, activationDeadline, check)
	if !ok {
		t.Fatalf("%s: not within %v; last: %s", what, activationDeadline, note)
	}
	return took
}

// refusedBy says whether a write was refused by the validation rule with
// message msg on field.
func refusedBy(s *server, method, path string, h http.Header, body, msg, field string) (bool, string) {
	r, err := s.send(method, path, h, body)
	if err != nil {
		return false, err.Error()
	}
	e := decodeError(r)
	return r.status == 422 && e.Error == msg && e.Field == field && e.Code == "validation_failed", r.String()
}

// TestPackValidate checks packs offline: the example passes; a pack with
// mistakes gets one line per problem, file:line:col: path: message, and
// exit status 1; no database is opened.
func TestPackValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	t.Run("the example", func(t *testing.T) {
		t.Parallel()
		// CRMD_DB names a file that must not appear: validate opens no database.
		db := filepath.Join(dir, "never.db")
		r := crmdEnv(t, []string{"CRMD_DB=" + db}, "pack", "validate", examplePack(t))
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "field-services: ok (7 files)\n") {
			t.Fatalf("want exit status 0, field-services: ok on stdout, nothing on stderr:\n%v", r)
		}
		if _, err := os.Stat(db); !os.IsNotExist(err) {
			t.Fatalf("crmd pack validate created %s (stat: %v); it must not touch a database", db, err)
		}
		// It takes no --db at all.
		wantFailure(t, crmd(t, "pack", "validate", "--db", db, examplePack(t)), 2, "-db")
		wantFailure(t, crmd(t, "pack", "validate"), 2, "missing PATH")
		wantFailure(t, crmd(t, "pack", "validate", filepath.Join(dir, "nonexistent")), 1, "nonexistent")
	})

	t.Run("compile errors", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(dir, "broken.yaml")
		writeFile(t, file, `pack: broken

validations:
  - name: misspelt field
    object: deals
    when: record.amunt > 0
    error: never
  - name: type mismatch
    object: deals
    when: record.amount > "x"
    error: never
  - name: not a condition
    object: deals
    when: record.amount
    error: never

automations:
  - name: unknown action
    object: leads
    on: create
    actions:
      - sned: {to: someone}
`)
		r := crmd(t, "pack", "validate", file)
		wantFailure(t, r, 1)
		// One line per problem, where it is, then the summary.
		want := []struct{ prefix, says string }{
			{file + ":6:18: validations[misspelt field].when: ", "unknown field amunt"},
			{file + ":10:25: validations[type mismatch].when: ", "mismatched types float64 and string"},
			{file + ":14:11: validations[not a condition].when: ", "expected bool"},
			{file + ":22:9: automations[unknown action].actions[0].sned: ", "unknown action sned"},
		}
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if len(lines) != len(want)+1 {
			t.Fatalf("want %d problem lines and a summary on stderr:\n%v", len(want), r)
		}
		for i, w := range want {
			if !strings.HasPrefix(lines[i], w.prefix) || !strings.Contains(lines[i], w.says) {
				t.Errorf("problem %d: got %q, want %q…%q", i+1, lines[i], w.prefix, w.says)
			}
		}
		if got := lines[len(lines)-1]; got != "crmd pack validate: 4 problem(s); nothing was changed" {
			t.Errorf("summary line: %q", got)
		}
	})

	t.Run("unknown keys", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(dir, "typos.yaml")
		writeFile(t, file, `pack: typos
validation: []
validations:
  - name: amounts are not negative
    object: deals
    when: record.amount < 0
    eror: an amount cannot be negative
`)
		r := crmd(t, "pack", "validate", file)
		wantFailure(t, r, 1)
		want := file + ":2:1: unknown key validation; did you mean validations?\n" +
			file + ":7:5: validations[0]: unknown key eror; did you mean error?\n" +
			"crmd pack validate: 2 problem(s); nothing was changed\n"
		if r.stderr != want {
			t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
		}
	})

	t.Run("every line has the form file:line:col", func(t *testing.T) {
		t.Parallel()
		// Two files of one pack, each with a problem: both are reported.
		pdir := filepath.Join(dir, "two-files")
		os.Mkdir(pdir, 0o755)
		writeFile(t, filepath.Join(pdir, "a.yaml"), "pack: two\nvalidations:\n  - name: a\n    object: dealz\n    when: true\n    error: x\n")
		writeFile(t, filepath.Join(pdir, "b.yml"), "pack: two\nflows:\n  - name: b\n    object: leads\n    steps:\n      - create: {object: tasks, fields: {nmae: x}}\n")
		r := crmd(t, "pack", "validate", pdir)
		wantFailure(t, r, 1, "unknown object dealz; did you mean deals?", "nmae")
		form := regexp.MustCompile(`^` + regexp.QuoteMeta(pdir) + `/(a\.yaml|b\.yml):[1-9][0-9]*:[1-9][0-9]*: \S.*: .+$`)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if len(lines) != 3 {
			t.Fatalf("want 2 problems and a summary:\n%v", r)
		}
		for _, l := range lines[:2] {
			if !form.MatchString(l) {
				t.Errorf("not of the form file:line:col: path: message: %q", l)
			}
		}
		if !strings.HasPrefix(lines[0], pdir+"/a.yaml:") || !strings.HasPrefix(lines[1], pdir+"/b.yml:6:") {
			t.Errorf("want the problems in file order, a.yaml's, then b.yml's at line 6:\n%s", r.stderr)
		}
	})
}

// TestPackValidateKeyPositions checks that a problem with the value of a
// rule's key is reported at that key's line, as expression errors are.
//
// It fails: an unknown object, an unknown on event and an unknown field
// named by a rule are reported at the line of the rule's first key (where
// its "- name:" is), though the path names the key: rules/compile.go passes
// the rule's Pos (v.Pos, ad.Pos, f.Pos, td.Pos) for them.
func TestPackValidateKeyPositions(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "keys.yaml")
	writeFile(t, file, `pack: keys
validations:
  - name: deals have an amount
    error: a deal needs an amount
    when: record.amount == 0
    object: dealz
  - name: leads have an email
    object: leads
    error: a lead needs an email address
    when: blank("email")
    on: creat
    field: emial
`)
	r := crmd(t, "pack", "validate", file)
	wantFailure(t, r, 1)
	for _, want := range []string{
		file + ":6:13: validations[deals have an amount].object: unknown object dealz",
		file + ":11:9: validations[leads have an email].on: ",
		file + ":12:12: validations[leads have an email].field: leads has no field emial",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("want a line starting %q:\n%s", want, r.stderr)
		}
	}
}

// TestPackTest runs the tests packs carry: all 21 of the example pass; a
// failing test makes the command fail and says which and why.
func TestPackTest(t *testing.T) {
	t.Parallel()
	t.Run("the example", func(t *testing.T) {
		t.Parallel()
		wantStdout(t, crmd(t, "pack", "test", examplePack(t)), 0, "21 tests, 21 passed, 0 failed\n")
		r := crmd(t, "pack", "test", "-v", examplePack(t))
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 22 || lines[21] != "21 tests, 21 passed, 0 failed" {
			t.Fatalf("want 21 ok lines and the summary:\n%v", r)
		}
		for _, l := range lines[:21] {
			if !strings.HasPrefix(l, "ok   ") {
				t.Errorf("-v line %q does not start with ok", l)
			}
		}
	})
	t.Run("failures", func(t *testing.T) {
		t.Parallel()
		file := testPack(t, "failing-tests.yaml")
		r := crmd(t, "pack", "test", file)
		want := "FAIL " + file + ":12:5: a lead without an email is accepted\n" +
			"     expected the write to be accepted, but it was refused (422): a lead needs an email address\n" +
			"FAIL " + file + ":18:5: a lead with an email is refused\n" +
			"     expected a refusal with status 422, but the write was accepted\n" +
			"3 tests, 1 passed, 2 failed\n"
		wantStdout(t, r, 1, want)
		if !strings.Contains(r.stderr, "2 of 3 tests failed") {
			t.Errorf("stderr does not say how many failed:\n%v", r)
		}
	})
}

// TestPackCommands runs apply, list, show and rollback as an operator does,
// with their exact output, and their errors.
func TestPackCommands(t *testing.T) {
	t.Parallel()
	storetest.Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := storetest.DSN(t, kind)
		crmdOK(t, "business", "create", "Acme", "--db", dsn)

		dir := t.TempDir()
		objectsFile, rulesFile := filepath.Join(dir, "objects.yaml"), filepath.Join(dir, "rules.yaml")
		objectsV1 := "pack: crm\nobjects:\n  leads:\n    fields:\n      budget: number\n"
		rulesV1 := "pack: crm\nvalidations:\n  - name: budgets are not negative\n    object: leads\n    when: record.budget < 0\n    error: a budget cannot be negative\n    field: budget\n"
		rulesV2 := strings.Replace(rulesV1, "record.budget < 0", "record.budget < 100", 1)
		writeFile(t, objectsFile, objectsV1)
		writeFile(t, rulesFile, rulesV1)

		wantStdout(t, packCmd(t, "apply", dsn, "Acme", "--by", "alice", dir), 0, "crm: revision 1 active\n")
		// The same content again stores nothing.
		wantStdout(t, packCmd(t, "apply", dsn, "Acme", "--by", "bob", dir), 0, "crm: unchanged\n")
		wantRevisions(t, listPacks(t, dsn, "Acme"), "crm", 1, 1)
		// One file changed: revision 2.
		writeFile(t, rulesFile, rulesV2)
		wantStdout(t, packCmd(t, "apply", dsn, "Acme", "--by", "carol", dir), 0, "crm: revision 2 active\n")

		rows := listPacks(t, dsn, "Acme")
		wantRevisions(t, rows, "crm", 2, 2)
		byRev := map[int]packRow{}
		for _, r := range rows {
			byRev[r.Revision] = r
			if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(r.Hash) || r.CreatedAt.IsZero() {
				t.Errorf("revision %d: hash %q, created_at %v", r.Revision, r.Hash, r.CreatedAt)
			}
		}
		if byRev[1].CreatedBy != "alice" || byRev[2].CreatedBy != "carol" || byRev[1].Hash == byRev[2].Hash ||
			byRev[2].CreatedAt.Before(byRev[1].CreatedAt) {
			t.Errorf("pack list --json: %+v", rows)
		}

		t.Run("list table", func(t *testing.T) {
			out := packCmd(t, "list", dsn, "Acme")
			if out.code != 0 {
				t.Fatalf("want exit status 0:\n%v", out)
			}
			lines := strings.Split(strings.TrimSuffix(out.stdout, "\n"), "\n")
			if len(lines) != 3 || !slices.Equal(strings.Fields(lines[0]), []string{"PACK", "REVISION", "ACTIVE", "HASH", "CREATED", "BY"}) {
				t.Fatalf("want a header and two rows:\n%v", out)
			}
			for _, l := range lines[1:] {
				f := strings.Fields(l)
				switch {
				case len(f) == 6 && f[0] == "crm" && f[1] == "2" && f[2] == "active" && f[3] == byRev[2].Hash[:12] && f[5] == "carol":
				case len(f) == 5 && f[0] == "crm" && f[1] == "1" && f[2] == byRev[1].Hash[:12] && f[4] == "alice":
				default:
					t.Errorf("unexpected row %q in:\n%s", l, out.stdout)
				}
			}
		})

		t.Run("show", func(t *testing.T) {
			r := packCmd(t, "show", dsn, "Acme", "crm")
			wantStdout(t, r, 0, "# file: objects.yaml\n"+objectsV1+"# file: rules.yaml\n"+rulesV2)
			if !strings.Contains(r.stderr, "pack crm revision 2 (active), by carol") {
				t.Errorf("stderr does not describe the revision:\n%v", r)
			}
			r = packCmd(t, "show", dsn, "Acme", "--revision", "1", "crm")
			wantStdout(t, r, 0, "# file: objects.yaml\n"+objectsV1+"# file: rules.yaml\n"+rulesV1)
			if !strings.Contains(r.stderr, "pack crm revision 1 (inactive), by alice") {
				t.Errorf("stderr does not describe the revision:\n%v", r)
			}
		})

		t.Run("rollback", func(t *testing.T) {
			wantStdout(t, packCmd(t, "rollback", dsn, "Acme", "crm"), 0, "crm: revision 1 active\n")
			wantRevisions(t, listPacks(t, dsn, "Acme"), "crm", 2, 1)
			r := packCmd(t, "show", dsn, "Acme", "crm")
			wantStdout(t, r, 0, "# file: objects.yaml\n"+objectsV1+"# file: rules.yaml\n"+rulesV1)
			// Nothing before revision 1.
			wantFailure(t, packCmd(t, "rollback", dsn, "Acme", "crm"), 1, "no revision 0")
			wantStdout(t, packCmd(t, "rollback", dsn, "Acme", "--to", "2", "crm"), 0, "crm: revision 2 active\n")
			wantRevisions(t, listPacks(t, dsn, "Acme"), "crm", 2, 2)
		})

		t.Run("errors", func(t *testing.T) {
			for _, sub := range [][]string{
				{"apply", dir}, {"list"}, {"show", "crm"}, {"rollback", "crm"},
			} {
				wantFailure(t, packCmd(t, sub[0], dsn, "Nope", sub[1:]...), 1, `no business named "Nope"`)
				wantFailure(t, crmd(t, append([]string{"pack", sub[0], "--db", dsn}, sub[1:]...)...), 2, "--business is required")
			}
			wantFailure(t, packCmd(t, "show", dsn, "Acme", "nope"), 1, "no such revision of pack nope")
			wantFailure(t, packCmd(t, "show", dsn, "Acme", "--revision", "9", "crm"), 1, "no such revision of pack crm")
			wantFailure(t, packCmd(t, "rollback", dsn, "Acme", "nope"), 1, "pack nope has no active revision")
			wantFailure(t, packCmd(t, "rollback", dsn, "Acme", "--to", "9", "crm"), 1)
			wantFailure(t, packCmd(t, "show", dsn, "Acme"), 2, "missing PACK")
			wantFailure(t, packCmd(t, "apply", dsn, "Acme"), 2, "missing PATH")
			// A second pack may not declare what the first declares.
			other := filepath.Join(t.TempDir(), "other.yaml")
			writeFile(t, other, "pack: other\nobjects:\n  leads:\n    fields:\n      budget: number\n")
			wantFailure(t, packCmd(t, "apply", dsn, "Acme", other), 1, other+":5:15: ", "budget of leads is declared twice", "nothing was changed")
			// None of it changed anything.
			wantRevisions(t, listPacks(t, dsn, "Acme"), "crm", 2, 2)
		})
	})
}

// TestPackApplySameContentFromAnotherPath applies one pack's content twice,
// from two places: a fresh checkout in CI, or the same directory named from
// another working directory. The content is the same, so the second apply
// must say unchanged and store nothing.
//
// It fails: the revision's hash covers the files' paths as the operator
// typed them (rules.Parse hashes File.Name, which readPacks sets to the path
// given on the command line), so every new checkout path stores a new
// revision, and pack show prints the operator's paths.
func TestPackApplySameContentFromAnotherPath(t *testing.T) {
	t.Parallel()
	dsn := storetest.DSN(t, "sqlite") // hashing does not depend on the store
	crmdOK(t, "business", "create", "Acme", "--db", dsn)
	content := "pack: crm\nvalidations:\n  - name: leads have a name\n    object: leads\n    when: blank(\"name\")\n    error: a lead needs a name\n"
	for i, dir := range []string{t.TempDir(), t.TempDir()} {
		writeFile(t, filepath.Join(dir, "crm.yaml"), content)
		want := "crm: revision 1 active\n"
		if i > 0 {
			want = "crm: unchanged\n"
		}
		if r := packCmd(t, "apply", dsn, "Acme", dir); r.stdout != want {
			t.Errorf("applying the same content from %s: want %q:\n%v", dir, want, r)
		}
	}
	if rows := listPacks(t, dsn, "Acme"); len(rows) != 1 {
		t.Errorf("one content, %d revisions: %+v", len(rows), rows)
	}
}
