package engine_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/engine/delivery"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/storetest"
)

// BenchmarkDispatch measures the dispatcher alone: b.N deliveries, queued
// beforehand, sent to a local receiver that answers 204 at once, and
// recorded. It reports deliveries a second, from the dispatcher's start
// until every outcome is recorded. The receiver shares the machine.
//
//	go test -run XXX -bench Dispatch -benchtime 20000x ./engine
func BenchmarkDispatch(b *testing.B) {
	for _, kind := range storetest.Kinds {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			st := storetest.Open(b, kind)
			var received atomic.Int64
			all := make(chan struct{})
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusNoContent)
				if received.Add(1) == int64(b.N) {
					close(all)
				}
			}))
			defer recv.Close()

			biz := &objects.Business{ID: objects.NewID(), Name: "bench", CreatedAt: time.Now().UTC()}
			if err := st.CreateBusiness(ctx, biz); err != nil {
				b.Fatal(err)
			}
			payload := []byte(`{"id":"06c3q6hczq1sg3m5g2z4aa9em6","type":"leads.created","occurred_at":"2026-11-23T09:42:13.000000Z",` +
				`"business":"bench","seq":1,"data":{"object":"leads","id":"06c3q6hczq1sg3m5g2z4aa9em6",` +
				`"record":{"id":"06c3q6hczq1sg3m5g2z4aa9em6","name":"Ada Lovelace","email":"ada@example.com","status":"new"}}}`)
			at := time.Now().UTC()
			for queued := 0; queued < b.N; {
				err := st.Write(ctx, biz.ID, func(tx objects.Tx) error {
					if err := tx.EnsureEndpoint(ctx, "hook", "whsec_c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0", at); err != nil {
						return err
					}
					for i := 0; i < 1000 && queued < b.N; i, queued = i+1, queued+1 {
						id := objects.NewID()
						if err := tx.InsertDelivery(ctx, &objects.Delivery{ID: id, MessageID: "msg_" + id, Endpoint: "hook",
							URL: recv.URL, Payload: payload, NextAttemptAt: at, CreatedAt: at}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}

			eng := engine.New(st, engine.Options{})
			client := delivery.NewClient(&delivery.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, delivery.ClientOptions{})
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			b.ResetTimer()
			start := time.Now()
			go func() { done <- eng.RunDispatcher(runCtx, engine.DispatcherOptions{Client: client}) }()
			<-all
			stop()
			if err := <-done; err != nil { // returns once every outcome is recorded
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deliveries/s")
			if ds, err := st.Deliveries(ctx, biz.ID, objects.DeliveryPending, 1); err != nil || len(ds) != 0 {
				b.Fatalf("deliveries still pending: %d, %v", len(ds), err)
			}
		})
	}
}
