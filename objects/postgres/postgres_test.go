package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/postgres"
	"github.com/crmd/crmd/objects/storetest"
)

// TestClaimAfterWaiting makes the race of two claims of one value happen
// every time: the first claim is held open until the second is waiting for
// it (seen in pg_stat_activity), then committed. The second must then be
// told who holds the value.
func TestClaimAfterWaiting(t *testing.T) {
	ctx := context.Background()
	url := storetest.PostgresURL(t)
	s, err := postgres.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := &objects.Business{ID: objects.NewID(), Name: "a", CreatedAt: time.Now()}
	if err := s.CreateBusiness(ctx, b); err != nil {
		t.Fatal(err)
	}
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)

	claimed, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.Write(ctx, b.ID, func(tx objects.Tx) error {
			if h, err := tx.Claim(ctx, "contacts", "email", "x", "r1"); err != nil || h != "" {
				return err
			}
			close(claimed)
			<-release
			return nil
		})
	}()
	<-claimed
	type result struct {
		holder string
		err    error
	}
	second := make(chan result, 1)
	go func() {
		var r result
		r.err = s.Write(ctx, b.ID, func(tx objects.Tx) error {
			var err error
			r.holder, err = tx.Claim(ctx, "contacts", "email", "x", "r2")
			return err
		})
		second <- r
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second claim never waited for the first")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if r := <-second; r.err != nil || r.holder != "r1" {
		t.Fatalf("the claim that waited got holder %q, error %v; want r1", r.holder, r.err)
	}
}
