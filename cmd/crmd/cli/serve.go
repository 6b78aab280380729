package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/engine/delivery"
	"github.com/crmd/crmd/httpapi"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/postgres"
)

// shutdownTimeout is how long SIGTERM waits for requests in flight.
const shutdownTimeout = 30 * time.Second

func serve(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", envOr("CRMD_ADDR", "127.0.0.1:8080"), "address to listen on (env CRMD_ADDR)")
	db := dbFlag(fs)
	maxBody := byteSize(httpapi.DefaultMaxBody)
	if v := envOr("CRMD_MAX_BODY", ""); v != "" {
		if err := maxBody.Set(v); err != nil {
			return fmt.Errorf("%w: CRMD_MAX_BODY: %v", errUsage, err)
		}
	}
	fs.Var(&maxBody, "max-body", "largest request body accepted, such as 1MiB or 65536 (env CRMD_MAX_BODY)")
	logFormat := fs.String("log-format", envOr("CRMD_LOG_FORMAT", "text"), "log format: text or json (env CRMD_LOG_FORMAT)")
	packsDir := fs.String("packs", "", "for development: watch this directory's rule pack and apply it to --business on every change")
	packsBusiness := fs.String("business", "", "the business --packs applies to")
	webhookAllow := fs.String("webhook-allow", envOr("CRMD_WEBHOOK_ALLOW", ""),
		"comma-separated CIDRs outgoing webhooks may reach although they are private, loopback and the like (env CRMD_WEBHOOK_ALLOW)")
	webhookLease := fs.Duration("webhook-lease", 2*time.Minute, "how long a delivery being sent stays with this process before another may take it over; longer than an attempt")
	webhookWorkers := fs.Int("webhook-workers", 32, "how many webhook deliveries this process sends at once")
	inboundRate := fs.Float64("inbound-rate", 0, "requests a second each inbound webhook URL takes, with bursts of twice as many (default 50)")
	debugAddr := fs.String("debug-addr", envOr("CRMD_DEBUG_ADDR", ""), "if set, serve Go's profiler (/debug/pprof/) on this address; keep it private (env CRMD_DEBUG_ADDR)")
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(c.stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(c.stderr, nil)
	default:
		return fmt.Errorf("%w: --log-format must be text or json", errUsage)
	}
	log := slog.New(handler)

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	st, err := openStore(ctx, *db, log)
	if err != nil {
		return err
	}
	defer st.Close()
	eng := engine.New(st, engine.Options{Logger: log})
	if bs, err := eng.Businesses(ctx); err == nil && len(bs) == 0 {
		// A PostgreSQL URL may hold a password: the hint does not repeat it.
		dbArg := ""
		switch {
		case postgres.IsURL(*db):
			dbArg = " --db <the same URL>"
		case *db != defaultDB:
			dbArg = " --db '" + *db + "'"
		}
		log.Info("the database has no businesses yet; create one and an API key for it with: crmd business create NAME" + dbArg +
			" && crmd key create --business NAME" + dbArg)
	}

	allow, err := delivery.ParseAllow(*webhookAllow)
	if err != nil {
		return fmt.Errorf("%w: --webhook-allow: %v", errUsage, err)
	}
	if *webhookWorkers < 1 {
		return fmt.Errorf("%w: --webhook-workers must be at least 1", errUsage)
	}
	if *inboundRate < 0 {
		return fmt.Errorf("%w: --inbound-rate must be positive", errUsage)
	}
	webhooks := delivery.NewClient(&delivery.Policy{Allow: allow}, delivery.ClientOptions{Logger: log})

	var watchBusiness string
	switch {
	case *packsDir != "" && *packsBusiness == "":
		return fmt.Errorf("%w: --packs needs --business", errUsage)
	case *packsDir == "" && *packsBusiness != "":
		return fmt.Errorf("%w: --business is for --packs", errUsage)
	case *packsDir != "":
		b, err := eng.Business(ctx, *packsBusiness)
		if errors.Is(err, objects.ErrNotFound) {
			return fmt.Errorf("no business named %q (crmd business list shows them)", *packsBusiness)
		}
		if err != nil {
			return err
		}
		watchBusiness = b.ID
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           httpapi.New(eng, httpapi.Options{Logger: log, MaxBody: int64(maxBody), InboundRate: *inboundRate}),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(handler, slog.LevelWarn),
	}
	if *debugAddr != "" {
		dln, err := net.Listen("tcp", *debugAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--debug-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(dln)
		log.Info("serving the profiler", "addr", dln.Addr().String())
	}
	engCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engDone := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		wg.Go(func() { eng.Run(engCtx) })
		wg.Go(func() {
			if err := eng.RunDispatcher(engCtx, engine.DispatcherOptions{Client: webhooks, Lease: *webhookLease, Workers: *webhookWorkers}); err != nil {
				log.Error("delivering webhooks", "err", err)
			}
		})
		wg.Wait()
		close(engDone)
	}()
	if watchBusiness != "" {
		go watchPacks(engCtx, eng, watchBusiness, *packsDir, log)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "store", storeKind(*db))

	select {
	case err := <-serveErr:
		stopEngine()
		<-engDone
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in flight", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	stopEngine()
	<-engDone
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down: %w", err)
	}
	log.Info("stopped")
	return nil
}

func storeKind(dsn string) string {
	if postgres.IsURL(dsn) {
		return "postgres"
	}
	return "sqlite " + dsn
}

// byteSize is a flag holding a number of bytes, written plainly (65536) or
// with a unit (64KiB, 1MiB, 1MB).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000_000}, {"GB", 1000_000_000}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return fmt.Errorf("%q is not a size such as 1MiB or 65536", s)
	}
	*b = byteSize(n * mult)
	return nil
}
