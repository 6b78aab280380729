// Command crmd-bench measures a running crmd server. It drives the records
// API of one object with a number of concurrent clients in a closed loop,
// each client sending its next request as soon as the previous answer
// arrives, and runs one timed phase per kind of request:
//
//   - create: POST new records, each with a unique email;
//   - get: GET random records created in the run (or, when none were, found
//     by listing);
//   - update: PATCH random records with a changing status;
//   - list: GET the first page of 100 records;
//   - deep-list: GET a page of 100 records at --deep-offset, after topping
//     the object up, untimed, to --records records;
//   - inbound (not run unless asked for): POST contact forms, each with a
//     unique email, to the inbound webhook at --inbound;
//   - deliveries (not run unless asked for, needs --receiver): send nothing,
//     wait for a stream of deliveries (a backlog that goes out when an
//     operator enables a disabled webhook) and time it from the first to
//     the last.
//
// With --receiver it also runs a webhook receiver, for a subscription to
// point at, and reports for each phase the deliveries that arrived (until
// none has for --settle after the phase), their rate from the phase's
// start to the last one, and their lag behind their events' occurred_at.
//
// For each phase it prints the requests, errors, requests per second and
// the exact p50, p99 and maximum latency, then the server's peak resident
// memory (VmHWM) when given its pid. A non-2xx answer, a transport error, a
// body that is not JSON, a created record without an id and a deep-list page
// short of 100 records are errors; the first few distinct ones of each phase
// are shown on stderr, and any error makes the exit status 1. The create
// payload has contact fields, which leads also have.
//
// Example:
//
//	go build -o /tmp/crmd ./cmd/crmd
//	/tmp/crmd business create bench --db /tmp/bench.db
//	export CRMD_BENCH_KEY=$(/tmp/crmd key create --business bench --db /tmp/bench.db)
//	/tmp/crmd serve --addr 127.0.0.1:18181 --db /tmp/bench.db 2>/tmp/crmd.log & PID=$!
//	go run ./cmd/crmd-bench --url http://127.0.0.1:18181 --pid $PID
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// config is what the flags set.
type config struct {
	url        string
	key        string
	object     string
	clients    int
	duration   time.Duration
	phases     []string
	records    int
	deepOffset int
	pid        int
	json       bool
	rate       float64
	receiver   string
	settle     time.Duration
	inbound    string
}

// run runs the bench and returns the exit status: 0 when every request
// succeeded, 1 when some failed or the bench could not go on, 2 for a usage
// error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "crmd-bench: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "crmd-bench: %s %s, %d clients, %s per phase, phases %s\n",
		cfg.url, cfg.object, cfg.clients, cfg.duration, strings.Join(cfg.phases, ","))
	b, err := newBench(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "crmd-bench: %v\n", err)
		return 2
	}
	if cfg.receiver != "" {
		if b.recv, err = startReceiver(cfg.receiver); err != nil {
			fmt.Fprintf(stderr, "crmd-bench: %v\n", err)
			return 2
		}
		defer b.recv.close()
	}
	results, runErr := b.runPhases(ctx)
	if len(results) > 0 {
		if err := writeResults(stdout, cfg, results); err != nil {
			fmt.Fprintf(stderr, "crmd-bench: writing results: %v\n", err)
			return 1
		}
	}
	status := 0
	if runErr != nil {
		fmt.Fprintf(stderr, "crmd-bench: %v\n", runErr)
		status = 1
	}
	for _, r := range results {
		if r.Errors > 0 {
			fmt.Fprintf(stderr, "crmd-bench: phase %s had %d errors\n", r.Phase, r.Errors)
			status = 1
		}
	}
	return status
}

// writeResults prints the results with the server's peak RSS, as a table or
// as JSON.
func writeResults(w io.Writer, cfg config, results []result) error {
	rssKiB := peakRSS(cfg.pid)
	if cfg.json {
		return writeJSON(w, cfg, results, rssKiB)
	}
	return writeTable(w, cfg, results, rssKiB)
}

// parseConfig reads the flags into a config and checks them.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("crmd-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "base URL of the crmd server")
	fs.StringVar(&cfg.key, "key", os.Getenv("CRMD_BENCH_KEY"), "API key (env CRMD_BENCH_KEY)")
	fs.StringVar(&cfg.object, "object", "contacts", "object to exercise")
	fs.IntVar(&cfg.clients, "clients", 32, "number of concurrent clients")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "duration of each phase")
	phases := fs.String("phases", strings.Join(phaseNames, ","), "comma-separated phases to run, in order")
	fs.IntVar(&cfg.records, "records", 100000, "records the object holds before deep-list (topped up, untimed); at least --deep-offset+100")
	fs.IntVar(&cfg.deepOffset, "deep-offset", 90000, "offset of the deep-list page")
	fs.IntVar(&cfg.pid, "pid", 0, "pid of the server, to report its peak RSS")
	fs.BoolVar(&cfg.json, "json", false, "print results as JSON instead of a table")
	fs.Float64Var(&cfg.rate, "rate", 0, "if set, the requests a second all clients send together, at most (default: as fast as answers come)")
	fs.StringVar(&cfg.receiver, "receiver", "", "if set, run a webhook receiver on this address (such as 127.0.0.1:18190) and report, per phase, the deliveries it got, their rate and their lag behind their events")
	fs.DurationVar(&cfg.settle, "settle", 2*time.Second, "with --receiver: after a phase, wait until no delivery arrived for this long")
	fs.StringVar(&cfg.inbound, "inbound", "", "path of an inbound webhook URL (/api/in/TOKEN) for the inbound phase, which posts contact forms to it")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.url = strings.TrimRight(cfg.url, "/")
	cfg.phases = strings.Split(*phases, ",")
	for _, p := range cfg.phases {
		if !slices.Contains(phaseNames, p) && !slices.Contains(extraPhases, p) {
			return cfg, fmt.Errorf("unknown phase %q; phases are %s", p, strings.Join(slices.Concat(phaseNames, extraPhases), ","))
		}
	}
	switch {
	case cfg.key == "":
		return cfg, errors.New("no API key: give --key or set CRMD_BENCH_KEY")
	case cfg.clients < 1:
		return cfg, errors.New("--clients must be at least 1")
	case cfg.duration <= 0:
		return cfg, errors.New("--duration must be positive")
	case cfg.records < 0 || cfg.deepOffset < 0:
		return cfg, errors.New("--records and --deep-offset must not be negative")
	case slices.Contains(cfg.phases, "deliveries") && cfg.receiver == "":
		return cfg, errors.New("the deliveries phase needs --receiver")
	case slices.Contains(cfg.phases, "inbound") && !strings.HasPrefix(cfg.inbound, "/api/in/"):
		return cfg, errors.New("the inbound phase needs --inbound /api/in/TOKEN")
	case cfg.rate < 0:
		return cfg, errors.New("--rate must not be negative")
	case cfg.settle <= 0:
		return cfg, errors.New("--settle must be positive")
	}
	return cfg, nil
}

// peakRSS returns the peak resident memory of process pid in KiB, the
// VmHWM of its status, or 0 when pid is 0 or its status cannot be read.
func peakRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _, _ := strings.Cut(strings.TrimSpace(v), " ") // "123456 kB"
			n, err := strconv.ParseInt(kib, 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// formatRSS renders a peak RSS in MiB, or "n/a" when it is unknown.
func formatRSS(kib int64) string {
	if kib <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f MiB", float64(kib)/1024)
}

// writeTable prints one row per phase and a line describing the run.
func writeTable(w io.Writer, cfg config, results []result, rssKiB int64) error {
	const row = "%-10s %9s %7s %10s %9s %9s %9s\n"
	var b strings.Builder
	fmt.Fprintf(&b, row, "phase", "requests", "errors", "req/s", "p50 ms", "p99 ms", "max ms")
	for _, r := range results {
		fmt.Fprintf(&b, row, r.Phase, strconv.Itoa(r.Requests), strconv.Itoa(r.Errors),
			fmt.Sprintf("%.1f", r.PerSecond), ms(r.P50), ms(r.P99), ms(r.Max))
	}
	if cfg.receiver != "" {
		const row = "%-10s %10s %12s %13s %13s %13s\n"
		fmt.Fprintf(&b, "webhook deliveries at %s:\n", cfg.receiver)
		fmt.Fprintf(&b, row, "phase", "deliveries", "per second", "lag p50 ms", "lag p99 ms", "lag max ms")
		for _, r := range results {
			d := r.Webhooks
			fmt.Fprintf(&b, row, r.Phase, strconv.Itoa(d.Count), fmt.Sprintf("%.1f", d.PerSecond), ms(d.LagP50), ms(d.LagP99), ms(d.LagMax))
		}
	}
	fmt.Fprintf(&b, "server peak RSS %s; %d clients, %s per phase, %s\n", formatRSS(rssKiB), cfg.clients, cfg.duration, cfg.url)
	_, err := io.WriteString(w, b.String())
	return err
}

// ms formats a duration in milliseconds with two decimals.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// writeJSON prints the results and the run's settings as one JSON object,
// with durations in milliseconds.
func writeJSON(w io.Writer, cfg config, results []result, rssKiB int64) error {
	type phaseJSON struct {
		Phase     string  `json:"phase"`
		Requests  int     `json:"requests"`
		Errors    int     `json:"errors"`
		PerSecond float64 `json:"req_per_s"`
		P50       float64 `json:"p50_ms"`
		P99       float64 `json:"p99_ms"`
		Max       float64 `json:"max_ms"`
	}
	out := struct {
		URL        string      `json:"url"`
		Object     string      `json:"object"`
		Clients    int         `json:"clients"`
		Duration   string      `json:"duration"`
		PeakRSSKiB *int64      `json:"server_peak_rss_kib"`
		Phases     []phaseJSON `json:"phases"`
	}{URL: cfg.url, Object: cfg.object, Clients: cfg.clients, Duration: cfg.duration.String(), Phases: []phaseJSON{}}
	if rssKiB > 0 {
		out.PeakRSSKiB = &rssKiB
	}
	toMS := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, r := range results {
		out.Phases = append(out.Phases, phaseJSON{r.Phase, r.Requests, r.Errors, r.PerSecond, toMS(r.P50), toMS(r.P99), toMS(r.Max)})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
