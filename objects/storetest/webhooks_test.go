package storetest

import (
	"context"
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
