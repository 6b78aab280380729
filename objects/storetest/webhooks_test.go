package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/crmd/crmd/objects"
)

// queueDeliveries stores n deliveries, due at once, for one endpoint of biz.
func queueDeliveries(t *testing.T, s objects.Store, biz string, n int) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Second)
	err := s.Write(ctx, biz, func(tx objects.Tx) error {
		if err := tx.EnsureEndpoint(ctx, "hook", "whsec_c2VjcmV0", at); err != nil {
			return err
		}
		for range n {
			id := objects.NewID()
			d := &objects.Delivery{ID: id, MessageID: "msg_" + id, Endpoint: "hook", URL: "https://example.com/hook",
				Payload: []byte(`{}`), NextAttemptAt: at, CreatedAt: at}
			if err := tx.InsertDelivery(ctx, d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestClaimDeliveries claims due deliveries from several claimers at once,
// as dispatchers in several processes do: no claim returns more than it
// asked for, no delivery is claimed twice while its lease runs, and every
// one is claimed.
func TestClaimDeliveries(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		s := Open(t, kind)
		biz := newBusiness(t, s, "Acme")
		const n, claimers, limit = 200, 4, 3
		queueDeliveries(t, s, biz.ID, n)

		var mu sync.Mutex
		claimedBy := map[string]string{}
		var wg sync.WaitGroup
		for c := range claimers {
			owner := fmt.Sprintf("claimer-%d", c)
			wg.Go(func() {
				for {
					ds, err := s.ClaimDeliveries(context.Background(), owner, time.Now(), time.Hour, limit)
					if err != nil {
						t.Error(err)
						return
					}
					if len(ds) == 0 {
						return
					}
					if len(ds) > limit {
						t.Errorf("%s asked for %d deliveries and was given %d", owner, limit, len(ds))
					}
					mu.Lock()
					for _, d := range ds {
						if other, ok := claimedBy[d.ID]; ok {
							t.Errorf("delivery %s claimed by %s and %s", d.ID, other, owner)
						}
						claimedBy[d.ID] = owner
						if d.Secret != "whsec_c2VjcmV0" || d.BusinessID != biz.ID || d.Endpoint != "hook" {
							t.Errorf("claimed delivery %+v", d)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(claimedBy) != n {
			t.Errorf("%d of %d deliveries claimed", len(claimedBy), n)
		}
		// Leased, nothing is due; once the leases end, everything is again.
		if ds, err := s.ClaimDeliveries(context.Background(), "late", time.Now(), time.Hour, n); err != nil || len(ds) != 0 {
			t.Errorf("claim during the leases: %d deliveries, %v", len(ds), err)
		}
		if ds, err := s.ClaimDeliveries(context.Background(), "late", time.Now().Add(2*time.Hour), time.Hour, n); err != nil || len(ds) != n {
			t.Errorf("claim after the leases: %d deliveries, want %d, %v", len(ds), n, err)
		}
	})
}

// TestHeldDeliveries: a disabled endpoint's deliveries are neither due nor
// claimed, also those queued while it is disabled, and enabling it makes
// them due again; a leased delivery is due again when its lease ends, not
// before.
func TestHeldDeliveries(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		biz := newBusiness(t, s, "Acme")
		queueDeliveries(t, s, biz.ID, 2)
		due := func() (time.Time, bool) {
			t.Helper()
			next, ok, err := s.NextDeliveryAt(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return next, ok
		}
		claim := func(at time.Time) int {
			t.Helper()
			ds, err := s.ClaimDeliveries(ctx, "me", at, time.Minute, 10)
			if err != nil {
				t.Fatal(err)
			}
			return len(ds)
		}

		if err := s.DisableEndpoint(ctx, biz.ID, "hook", "maintenance", time.Now()); err != nil {
			t.Fatal(err)
		}
		queueDeliveries(t, s, biz.ID, 1) // queued while disabled
		if _, ok := due(); ok {
			t.Error("a disabled endpoint's deliveries are due")
		}
		if n := claim(time.Now()); n != 0 {
			t.Errorf("claimed %d deliveries of a disabled endpoint", n)
		}
		eps, err := s.Endpoints(ctx, biz.ID)
		if err != nil || len(eps) != 1 || !eps[0].Disabled || eps[0].DisabledReason != "maintenance" {
			t.Fatalf("endpoints after disable: %+v, %v", eps, err)
		}
		if err := s.DisableEndpoint(ctx, biz.ID, "hook", "again", time.Now()); err != nil {
			t.Fatal(err)
		}
		if eps, _ := s.Endpoints(ctx, biz.ID); eps[0].DisabledReason != "maintenance" {
			t.Errorf("a second disable changed the reason to %q", eps[0].DisabledReason)
		}

		if err := s.EnableEndpoint(ctx, biz.ID, "hook"); err != nil {
			t.Fatal(err)
		}
		if _, ok := due(); !ok {
			t.Error("nothing due after enabling")
		}
		start := time.Now()
		if n := claim(start); n != 3 {
			t.Fatalf("claimed %d deliveries after enabling, want 3", n)
		}
		// Leased for a minute: due when the lease ends.
		next, ok := due()
		if !ok || next.Before(start.Add(time.Minute-time.Millisecond)) {
			t.Errorf("leased deliveries due at %v (%v), want at the lease's end %v", next, ok, start.Add(time.Minute))
		}
		if n := claim(start.Add(2 * time.Minute)); n != 3 {
			t.Errorf("claimed %d deliveries after their leases ended, want 3", n)
		}

		for _, err := range []error{
			s.DisableEndpoint(ctx, biz.ID, "nosuch", "", time.Now()),
			s.EnableEndpoint(ctx, biz.ID, "nosuch"),
		} {
			if !errors.Is(err, objects.ErrNotFound) {
				t.Errorf("an unknown endpoint: %v, want ErrNotFound", err)
			}
		}
	})
}

// TestRecordAttempts records a batch of outcomes in order: a success, a
// failure to try again, one whose lease another owner holds (ignored), and
// a 410, which disables the endpoint and holds what it has pending.
func TestRecordAttempts(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		biz := newBusiness(t, s, "Acme")
		queueDeliveries(t, s, biz.ID, 4)
		ds, err := s.ClaimDeliveries(ctx, "me", time.Now(), time.Minute, 4)
		if err != nil || len(ds) != 4 {
			t.Fatalf("claimed %d, %v", len(ds), err)
		}
		at := time.Now().UTC().Truncate(time.Microsecond)
		base := objects.Attempt{BusinessID: biz.ID, Endpoint: "hook", Owner: "me", At: at, Response: []byte{}, FailingFor: time.Hour}
		ok, retry, stolen, gone := base, base, base, base
		ok.DeliveryID, ok.OK, ok.Status = ds[0].ID, true, 204
		retry.DeliveryID, retry.Status, retry.Next = ds[1].ID, 503, at.Add(5*time.Second)
		stolen.DeliveryID, stolen.Owner, stolen.OK = ds[2].ID, "someone else", true
		gone.DeliveryID, gone.Status, gone.Disable = ds[3].ID, 410, "the receiver answered 410 Gone"
		if err := s.RecordAttempts(ctx, []objects.Attempt{ok, retry, stolen, gone}); err != nil {
			t.Fatal(err)
		}
		all, err := s.Deliveries(ctx, biz.ID, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, d := range all {
			got[d.ID] = fmt.Sprintf("%s/%d/%d", d.Status, d.Attempts, d.LastStatus)
		}
		want := map[string]string{
			ds[0].ID: "succeeded/1/204",
			ds[1].ID: "pending/1/503",
			ds[2].ID: "pending/0/0", // still leased to me, unrecorded
			ds[3].ID: "failed/1/410",
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("delivery %s: %s, want %s", id, got[id], w)
			}
		}
		eps, err := s.Endpoints(ctx, biz.ID)
		if err != nil || len(eps) != 1 || !eps[0].Disabled || eps[0].DisabledReason != "the receiver answered 410 Gone" {
			t.Fatalf("endpoint after a 410: %+v, %v", eps, err)
		}
		// The retry is held with its endpoint: nothing is due, even later.
		if _, due, _ := s.NextDeliveryAt(ctx); due {
			t.Error("a disabled endpoint's retry is due")
		}
		if ds, _ := s.ClaimDeliveries(ctx, "me", at.Add(time.Hour), time.Minute, 10); len(ds) != 0 {
			t.Errorf("claimed %d deliveries of a disabled endpoint", len(ds))
		}
	})
}
