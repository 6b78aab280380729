package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/storetest"
	"github.com/crmd/crmd/rules"
)

// BenchmarkWriteRules measures a write through a pack of 50 validation rules
// and 10 automations on deals (issue 3: under 50 µs of engine time per
// write, excluding storage):
//
//	go test -run XXX -bench WriteRules -benchmem -count 3 ./engine
//
// For create and update it runs the same writes, on one SQLite store, to
// two businesses with the same schema (the pack's custom fields of deals):
// "rules" has the pack's 50 validations and 10 automations, "norules" has
// none. The store is wrapped in a stopwatch that adds up the time spent in
// it: in every Tx call, and in Store.Write outside the engine's function
// (queueing, BEGIN, savepoints, COMMIT and its fsync). Besides ns/op (the
// whole write, wall clock), each reports engine-ns/op, the write's time
// outside the store, and store-ns/op. The difference of engine-ns/op
// between rules and norules is what the rules cost the engine per write,
// storage excluded; it includes the engine's side of the records the
// automations create (2 per create, 1 per update), whose storage is in
// store-ns/op.
//
// "eval" evaluates the rules alone, through the rules package's public
// API, as engine/write.go does: the before-save automations and their set
// values, the validations, and the conditions and field values of the
// after-save automations; without the schema checks and without the nested
// writes.
//
// The SQLite file is in the test's temporary directory; with synchronous
// FULL every commit waits for an fsync, which dominates ns/op on a disk.
// TMPDIR=/dev/shm puts it on tmpfs.
func BenchmarkWriteRules(b *testing.B) {
	ctx := context.Background()
	st := &timedStore{Store: storetest.Open(b, "sqlite")}
	eng := engine.New(st, engine.Options{})
	day := time.Now().UTC().Truncate(24 * time.Hour)
	with := benchBusiness(b, ctx, eng, st, "rules", benchPack(true), day)
	without := benchBusiness(b, ctx, eng, st, "norules", benchPack(false), day)
	ev := newBenchEval(b, day)

	for _, op := range []engine.Op{engine.Create, engine.Update} {
		b.Run(string(op), func(b *testing.B) {
			for _, v := range []struct {
				name string
				biz  *benchBiz
			}{{"norules", without}, {"rules", with}} {
				b.Run(v.name, func(b *testing.B) {
					b.ReportAllocs()
					st.reset()
					var writes time.Duration
					i := 0
					for b.Loop() {
						w := v.biz.request(op, i)
						start := time.Now()
						_, err := eng.Write(ctx, w)
						writes += time.Since(start)
						if err != nil {
							b.Fatalf("%s write %d: %v", op, i, err)
						}
						i++
					}
					store := st.write - st.fn + st.tx
					b.ReportMetric(float64(writes-store)/float64(i), "engine-ns/op")
					b.ReportMetric(float64(store)/float64(i), "store-ns/op")
				})
			}
			b.Run("eval", func(b *testing.B) {
				b.ReportAllocs()
				var validations, automations int
				i := 0
				for b.Loop() {
					nv, na := ev.run(b, op, i)
					validations += nv
					automations += na
					i++
				}
				b.ReportMetric(float64(validations)/float64(i), "validations/op")
				b.ReportMetric(float64(automations)/float64(i), "automations/op")
			})
		})
	}
}

// timedStore is a store that adds up the time spent in it: write in
// Store.Write, fn in the function Write runs, tx in the Tx calls that
// function makes. The store is the real one; nothing is left out.
type timedStore struct {
	objects.Store
	write, fn, tx time.Duration
}

func (s *timedStore) reset() { s.write, s.fn, s.tx = 0, 0, 0 }

func (s *timedStore) Write(ctx context.Context, businessID string, fn func(objects.Tx) error) error {
	start := time.Now()
	err := s.Store.Write(ctx, businessID, func(tx objects.Tx) error {
		start := time.Now()
		err := fn(&timedTx{Tx: tx, d: &s.tx})
		s.fn += time.Since(start)
		return err
	})
	s.write += time.Since(start)
	return err
}

// timedTx adds the time of the calls a write makes to d.
type timedTx struct {
	objects.Tx
	d *time.Duration
}

func (t *timedTx) since(start time.Time) { *t.d += time.Since(start) }

func (t *timedTx) Get(ctx context.Context, object, id string) (*objects.Record, error) {
	defer t.since(time.Now())
	return t.Tx.Get(ctx, object, id)
}

func (t *timedTx) Exists(ctx context.Context, object, id string) (bool, error) {
	defer t.since(time.Now())
	return t.Tx.Exists(ctx, object, id)
}

func (t *timedTx) Insert(ctx context.Context, r *objects.Record) error {
	defer t.since(time.Now())
	return t.Tx.Insert(ctx, r)
}

func (t *timedTx) Update(ctx context.Context, r *objects.Record) error {
	defer t.since(time.Now())
	return t.Tx.Update(ctx, r)
}

func (t *timedTx) Delete(ctx context.Context, object, id string) error {
	defer t.since(time.Now())
	return t.Tx.Delete(ctx, object, id)
}

func (t *timedTx) Claim(ctx context.Context, object, field, value, id string) (string, error) {
	defer t.since(time.Now())
	return t.Tx.Claim(ctx, object, field, value, id)
}

func (t *timedTx) Release(ctx context.Context, object, field, value, id string) error {
	defer t.since(time.Now())
	return t.Tx.Release(ctx, object, field, value, id)
}

// benchValidations are the pack's validation rules on deals: on is create,
// update or "" for both.
var benchValidations = []struct{ name, on, field, when string }{
	{"amounts are not negative", "", "amount", `record.amount < 0`},
	{"discounts are bounded", "", "discount_pct", `record.discount_pct < 0 || record.discount_pct > 40`},
	{"big discounts need a big deal", "", "discount_pct", `record.discount_pct > 15 && record.amount < 20000`},
	{"probability is a percentage", "", "probability", `record.probability < 0 || record.probability > 100`},
	{"won deals have an amount", "", "amount", `record.stage == "won" && record.amount <= 0`},
	{"won deals have a close date", "", "close_date", `record.stage == "won" && blank("close_date")`},
	{"proposals have an amount", "", "amount", `record.stage == "proposal" && record.amount <= 0`},
	{"proposals have a close date", "", "close_date", `record.stage == "proposal" && blank("close_date")`},
	{"deals have a name", "", "name", `blank("name") || len(trim(record.name)) < 3`},
	{"names are short", "", "name", `len(record.name) > 120`},
	{"names are not shouted", "", "name", `len(record.name) > 10 && upper(record.name) == record.name`},
	{"currencies are known", "", "currency", `!blank("currency") && record.currency not in ["EUR", "GBP", "USD", "CHF"]`},
	{"amounts have a currency", "", "currency", `record.amount > 0 && blank("currency")`},
	{"close dates are recent", "", "close_date", `!blank("close_date") && record.close_date < today() - days(365)`},
	{"close dates are near", "", "close_date", `!blank("close_date") && record.close_date > today() + days(3 * 365)`},
	{"close dates are this century", "", "close_date", `!blank("close_date") && record.close_date >= date("2100-01-01")`},
	{"work starts after closing", "", "expected_start", `!blank("expected_start") && !blank("close_date") && record.expected_start < record.close_date`},
	{"work starts within a year", "", "expected_start", `!blank("expected_start") && !blank("close_date") && days_between(record.close_date, record.expected_start) > 365`},
	{"large deals have a company", "", "company_id", `record.amount >= 10000 && blank("company_id")`},
	{"proposals have an owner", "", "owner", `record.stage in ["proposal", "won"] && blank("owner")`},
	{"owners are lower case", "", "owner", `!blank("owner") && lower(record.owner) != record.owner`},
	{"owners are one word", "", "owner", `!blank("owner") && record.owner contains " "`},
	{"PO numbers have their form", "", "po_number", `!blank("po_number") && !(record.po_number matches "^PO-[0-9]{5}$")`},
	{"large won deals have a PO", "", "po_number", `record.stage == "won" && record.amount > 5000 && blank("po_number")`},
	{"very large deals have a region", "", "region", `blank("region") && record.amount > 50000`},
	{"seats are positive", "", "seats", `!blank("seats") && record.seats <= 0`},
	{"seats are bounded", "", "seats", `record.seats > 500`},
	{"seats are not given away", "", "amount", `record.seats > 0 && record.amount / record.seats < 50`},
	{"margins are plausible", "", "margin_pct", `record.margin_pct < -20 || record.margin_pct > 90`},
	{"low margins on big deals", "", "margin_pct", `record.margin_pct < 5 && record.amount > 100000`},
	{"net amounts are not negative", "", "discount_pct", `record.amount * (1 - record.discount_pct / 100) < 0`},
	{"web deals are described", "", "description", `record.source == "web" && blank("description")`},
	{"sources are known", "", "source", `!blank("source") && lower(record.source) not in ["web", "referral", "event", "partner", "import"]`},
	{"descriptions are not placeholders", "", "description", `!blank("description") && lower(trim(record.description)) in ["tbd", "todo", "n/a", "-"]`},
	{"no test deals", "", "name", `lower(record.name) startsWith "test " || lower(record.name) contains "do not use"`},
	{"proposals have a next step", "", "next_step", `record.stage == "proposal" && blank("next_step")`},
	{"next steps are short", "", "next_step", `len(record.next_step) > 200`},
	{"won deals stay won", "update", "stage", `old.stage == "won" && record.stage != "won"`},
	{"lost deals reopen as qualified", "update", "stage", `old.stage == "lost" && record.stage not in ["lost", "qualified"]`},
	{"new deals are not won at once", "update", "stage", `old.stage == "new" && record.stage == "won"`},
	{"won amounts are frozen", "update", "amount", `old.stage == "won" && changed("amount")`},
	{"won currencies are frozen", "update", "currency", `old.stage == "won" && changed("currency")`},
	{"proposed companies are kept", "update", "company_id", `old.stage in ["proposal", "won"] && changed("company_id")`},
	{"proposed discounts do not grow", "update", "discount_pct", `old.stage == "proposal" && changed("discount_pct") && record.discount_pct > old.discount_pct`},
	{"amounts do not halve", "update", "amount", `changed("amount") && old.amount > 0 && record.amount < old.amount / 2`},
	{"close dates do not slip back", "update", "close_date", `changed("close_date") && !blank("close_date") && record.close_date < old.close_date - days(90)`},
	{"probability follows the stage", "update", "probability", `changed("probability") && !changed("stage") && record.probability > old.probability + 50`},
	{"won deals keep their owner", "update", "owner", `old.stage == "won" && changed("owner")`},
	{"new deals are open", "create", "stage", `record.stage in ["won", "lost"]`},
	{"new deals are not back-dated", "create", "close_date", `!blank("close_date") && record.close_date < today()`},
}

// benchAutomations are the pack's 10 automations on deals: 7 with set
// actions before the save, 3 creating a record after it. Those with a
// condition that may be false come last among the before-save ones.
const benchAutomations = `automations:
  - name: currencies are upper case
    object: deals
    on: [create, update]
    when: '!blank("currency")'
    actions:
      - set: {currency: = upper(trim(record.currency))}
  - name: owners are trimmed and lower cased
    object: deals
    on: [create, update]
    when: '!blank("owner")'
    actions:
      - set: {owner: = lower(trim(record.owner))}
  - name: priority from amount
    object: deals
    on: [create, update]
    when: changed("amount")
    actions:
      - set:
          priority: '= record.amount >= 50000 ? "high" : (record.amount >= 10000 ? "medium" : "low")'
  - name: probability from stage
    object: deals
    on: [create, update]
    when: changed("stage")
    actions:
      - set:
          probability: '= record.stage == "won" ? 100 : (record.stage == "lost" ? 0 : (record.stage == "proposal" ? 60 : (record.stage == "qualified" ? 40 : 10)))'
  - name: new deals start open
    object: deals
    on: create
    actions:
      - set:
          status: open
          stage: '= blank("stage") ? "new" : record.stage'
  - name: proposals get a next step
    object: deals
    on: update
    when: changed("stage") && record.stage == "proposal"
    actions:
      - set: {next_step: Send the proposal}
  - name: won and lost deals close
    object: deals
    on: update
    when: record.stage in ["won", "lost"]
    actions:
      - set: {status: closed}
  - name: qualify new deals
    object: deals
    on: create
    actions:
      - create:
          object: tasks
          fields:
            name: = "Qualify " + record.name
            status: open
            priority: = record.priority
            due_date: = today() + days(2)
            owner: = record.owner
            deal_id: = record.id
            company_id: = record.company_id
  - name: note large deals
    object: deals
    on: create
    when: record.amount >= 10000
    actions:
      - create:
          object: notes
          fields:
            name: = "Large deal " + record.name
            body: = "Amount " + string(record.amount) + " " + record.currency + " for " + string(record.seats) + " seats"
            owner: = record.owner
            deal_id: = record.id
  - name: log amount changes
    object: deals
    on: update
    when: changed("amount")
    actions:
      - create:
          object: activities
          fields:
            name: = "Amount of " + record.name + " changed"
            type: note
            occurred_at: = now()
            owner: = record.owner
            deal_id: = record.id
            description: = "from " + string(old.amount) + " to " + string(record.amount)
`

// benchObjects are the custom fields of deals the writes use.
const benchObjects = `objects:
  deals:
    fields:
      stage: {values: [new, qualified, proposal, won, lost]}
      region: {type: string, values: [north, south, east, west]}
      discount_pct: {type: number, min: 0, max: 100}
      seats: integer
      expected_start: date
      po_number: string
      priority: {type: string, values: [low, medium, high]}
      margin_pct: number
      next_step: string
`

// benchPack generates the pack: the custom fields of deals and, with
// withRules, the 50 validations and 10 automations.
func benchPack(withRules bool) []rules.File {
	files := []rules.File{{Name: "objects.yaml", Data: []byte("pack: bench\n" + benchObjects)}}
	if !withRules {
		return files
	}
	var v strings.Builder
	v.WriteString("pack: bench\nvalidations:\n")
	for _, r := range benchValidations {
		fmt.Fprintf(&v, "  - name: %s\n    object: deals\n", r.name)
		if r.on != "" {
			fmt.Fprintf(&v, "    on: %s\n", r.on)
		}
		fmt.Fprintf(&v, "    when: '%s'\n    error: %s\n    field: %s\n", r.when, r.name+" (refused)", r.field)
	}
	return append(files,
		rules.File{Name: "validations.yaml", Data: []byte(v.String())},
		rules.File{Name: "automations.yaml", Data: []byte("pack: bench\n" + benchAutomations)})
}

func parseBenchPack(b *testing.B, withRules bool) *rules.Pack {
	b.Helper()
	p, errs := rules.Parse("bench", benchPack(withRules))
	if errs != nil {
		b.Fatalf("the bench pack does not parse:\n%v", errs)
	}
	return p
}

// benchBiz is a business the writes go to, with deals to update.
type benchBiz struct {
	id      string
	company string
	day     time.Time
	deals   []string
}

// benchDeals is how many deals each business holds for updates.
const benchDeals = 1000

func benchBusiness(b *testing.B, ctx context.Context, eng *engine.Engine, st objects.Store, name string, files []rules.File, day time.Time) *benchBiz {
	b.Helper()
	biz, err := eng.CreateBusiness(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	p, errs := rules.Parse("bench", files)
	if errs != nil {
		b.Fatalf("the bench pack does not parse:\n%v", errs)
	}
	if _, err := eng.ApplyPacks(ctx, biz.ID, []*rules.Pack{p}, engine.ApplyOptions{By: "bench"}); err != nil {
		b.Fatalf("applying the bench pack: %v", err)
	}
	res, err := eng.Write(ctx, engine.WriteRequest{BusinessID: biz.ID, Object: "companies", Op: engine.Create,
		Fields: map[string]any{"name": "Plumb & Co"}})
	if err != nil {
		b.Fatal(err)
	}
	bb := &benchBiz{id: biz.ID, company: res.Record.ID, day: day}
	err = st.Write(ctx, biz.ID, func(tx objects.Tx) error {
		at := time.Now().UTC().Truncate(time.Microsecond)
		for range benchDeals {
			r := &objects.Record{Object: "deals", ID: objects.NewID(), CreatedAt: at, UpdatedAt: at, Fields: benchStoredDeal(bb.company, day)}
			if err := tx.Insert(ctx, r); err != nil {
				return err
			}
			bb.deals = append(bb.deals, r.ID)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return bb
}

// benchStoredDeal is a deal as the rules leave it, in canonical form.
func benchStoredDeal(company string, day time.Time) map[string]any {
	return map[string]any{
		"name": "Boiler swap", "amount": 20000.0, "currency": "EUR", "stage": "qualified", "status": "open",
		"probability": int64(40), "close_date": day.AddDate(0, 0, 30).Format(time.DateOnly), "company_id": company,
		"source": "web", "owner": "ada", "description": "Replace the boiler and two radiators", "region": "north",
		"discount_pct": 5.0, "seats": int64(3), "expected_start": day.AddDate(0, 0, 37).Format(time.DateOnly),
		"po_number": "PO-00001", "priority": "medium", "margin_pct": 25.0, "next_step": "Call back",
	}
}

// benchCreate is the i-th deal created, as a client sends it.
func benchCreate(company string, day time.Time, i int) map[string]any {
	return map[string]any{
		"name":         "Boiler swap " + strconv.Itoa(i),
		"amount":       json.Number(strconv.Itoa(12000 + i%40000)),
		"currency":     "eur",
		"stage":        "qualified",
		"probability":  json.Number("40"),
		"close_date":   day.AddDate(0, 0, 30).Format(time.DateOnly),
		"company_id":   company,
		"source":       "web",
		"owner":        " Ada ",
		"description":  "Replace the boiler and two radiators",
		"region":       "north",
		"discount_pct": json.Number("5"),
		"seats":        json.Number("3"),
		"po_number":    fmt.Sprintf("PO-%05d", i%100000),
		"next_step":    "Call back",
		"margin_pct":   json.Number("25"),
	}
}

// benchPatch is the i-th update: of deal i mod benchDeals, with a new
// amount, and a stage that moves between qualified and proposal on each
// visit.
func benchPatch(i int) map[string]any {
	return map[string]any{
		"amount": json.Number(strconv.Itoa(15000 + i%9973)),
		"stage":  [2]string{"proposal", "qualified"}[(i/benchDeals)%2],
	}
}

func (bb *benchBiz) request(op engine.Op, i int) engine.WriteRequest {
	w := engine.WriteRequest{BusinessID: bb.id, Object: "deals", Op: op}
	if op == engine.Create {
		w.Fields = benchCreate(bb.company, bb.day, i)
	} else {
		w.ID = bb.deals[i%len(bb.deals)]
		w.Fields = benchPatch(i)
	}
	return w
}

// benchEval evaluates the pack's rules without the engine: the pack is
// compiled with actions of its own that keep their values, so that their
// expressions can be evaluated as the built-in set and create do.
type benchEval struct {
	obj      *objects.Object
	r        *rules.ObjectRules
	day, now time.Time
	creates  []map[string]any // canonical create payloads
	patches  []map[string]any // canonical update patches
	old      map[string]any
}

// evalAction is a compiled set or create: its values.
type evalAction struct {
	phase  rules.Phase
	values []*rules.FieldValue
}

func (a *evalAction) Phase() rules.Phase { return a.phase }

var evalActions = map[string]rules.ActionFactory{
	"set": func(c *rules.ActionCompiler, config *yaml.Node, path string) rules.Action {
		return &evalAction{phase: rules.BeforeSave, values: c.Values(config, path, c.Object)}
	},
	"create": func(c *rules.ActionCompiler, config *yaml.Node, path string) rules.Action {
		var obj *objects.Object
		var fields *yaml.Node
		c.Mapping(config, path, []string{"object", "fields"}, func(key string, v *yaml.Node, path string) {
			switch key {
			case "object":
				if name, ok := c.String(v, path); ok {
					obj, _ = c.LookupObject(v, path, name)
				}
			case "fields":
				fields = v
			}
		})
		if obj == nil || fields == nil {
			c.Errorf(config, path, "create needs object and fields")
			return nil
		}
		return &evalAction{phase: rules.AfterSave, values: c.Values(fields, path+".fields", obj)}
	},
}

func newBenchEval(b *testing.B, day time.Time) *benchEval {
	b.Helper()
	rs, errs := rules.Compile([]*rules.Pack{parseBenchPack(b, true)}, rules.Options{
		Actions:   func(id string) (rules.ActionFactory, bool) { f, ok := evalActions[id]; return f, ok },
		ActionIDs: func() []string { return []string{"create", "set"} },
	})
	if errs != nil {
		b.Fatalf("the bench pack does not compile:\n%v", errs)
	}
	obj, _ := rs.Schema.Object("deals")
	e := &benchEval{obj: obj, r: rs.For("deals"), day: day, now: time.Now().UTC().Truncate(time.Microsecond)}
	company := objects.NewID()
	for i := range 64 {
		c, err := obj.CheckInput(benchCreate(company, day, i), false)
		if err != nil {
			b.Fatal(err)
		}
		// Every patch changes the amount and the stage of the old record,
		// as every update of the write benchmarks does.
		p, err := obj.CheckInput(map[string]any{"amount": json.Number(strconv.Itoa(15000 + i)), "stage": "proposal"}, true)
		if err != nil {
			b.Fatal(err)
		}
		e.creates, e.patches = append(e.creates, c), append(e.patches, p)
	}
	e.old = benchStoredDeal(company, day)
	return e
}

// run evaluates the rules of the i-th write, as engine/write.go does, and
// returns how many validations and automations ran.
func (e *benchEval) run(b *testing.B, op engine.Op, i int) (validations, automations int) {
	event := string(op)
	var env *rules.Env
	var fields map[string]any
	if op == engine.Create {
		fields = maps.Clone(e.creates[i%len(e.creates)])
		env = rules.NewEnv(e.obj, event, "", e.now, e.now, fields, nil)
	} else {
		fields = maps.Clone(e.old)
		for k, v := range e.patches[i%len(e.patches)] {
			fields[k] = v
		}
		env = rules.NewEnv(e.obj, event, "06c3ax93w5zpype3m3zskw1xyx", e.now, e.now, fields, e.old)
	}
	when := func(a *rules.Automation) bool {
		if a.When == nil {
			return true
		}
		ok, err := a.When.Bool(env)
		if err != nil {
			b.Fatal(err)
		}
		return ok
	}
	for _, a := range e.r.Before[event] {
		if !when(a) {
			continue
		}
		automations++
		for _, act := range a.Actions {
			for _, fv := range act.(*evalAction).values {
				v, err := fv.Value.Eval(env)
				if err != nil {
					b.Fatal(err)
				}
				env.Set(fv.Field.Name, v)
			}
		}
	}
	if op == engine.Create {
		e.obj.DeriveName(fields)
		env.Set("name", fields["name"])
	}
	for _, v := range e.r.Validations {
		if !v.On[event] {
			continue
		}
		block, err := v.When.Bool(env)
		if err != nil || block {
			b.Fatalf("validation %s: %v, %v", v.Name, block, err)
		}
		validations++
	}
	env.SetRecord("06c3ax93w5zpype3m3zskw1xyx", e.now, e.now)
	for _, a := range e.r.After[event] {
		if !when(a) {
			continue
		}
		automations++
		for _, act := range a.Actions {
			for _, fv := range act.(*evalAction).values {
				if _, err := fv.Value.Eval(env); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	return validations, automations
}
