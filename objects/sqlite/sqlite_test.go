package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/crmd/crmd/objects"
)

// TestTwoWritersOneFile writes through two stores on one file at once, as a
// server and an operator command do: SQLite's locks and the busy timeout
// must serialise them without losing or refusing a write, and the page
// counts must stay exact.
func TestTwoWritersOneFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "crmd.db")
	var stores [2]*Store
	for i := range stores {
		s, err := Open(ctx, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	biz := &objects.Business{ID: objects.NewID(), Name: "a", CreatedAt: time.Now()}
	if err := stores[0].CreateBusiness(ctx, biz); err != nil {
		t.Fatal(err)
	}
	const perWriter = 150
	var wg sync.WaitGroup
	errs := make(chan error, 16*perWriter)
	for w := range 16 {
		s := stores[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				at := time.Now()
				r := &objects.Record{Object: "notes", ID: objects.NewID(), CreatedAt: at, UpdatedAt: at, Fields: map[string]any{"name": fmt.Sprint(w, i)}}
				if err := s.Write(ctx, biz.ID, func(tx objects.Tx) error { return tx.Insert(ctx, r) }); err != nil {
					errs <- err
				}
				if w%4 == 0 && i%10 == 0 { // the other store also creates keys, as the CLI does
					k := &objects.APIKey{BusinessID: biz.ID, ID: objects.NewID(), Prefix: "ak_x", Hash: []byte(objects.NewID()), CreatedAt: at}
					if err := stores[1-w%2].CreateAPIKey(ctx, k); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := 16 * perWriter
	var seen []string
	for offset := 0; ; offset += objects.MaxPageSize {
		recs, err := stores[1].List(ctx, biz.ID, "notes", objects.MaxPageSize, offset)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			seen = append(seen, r.ID)
		}
		if len(recs) < objects.MaxPageSize {
			break
		}
	}
	if len(seen) != total {
		t.Fatalf("paged through %d records, want %d", len(seen), total)
	}
	unique := map[string]bool{}
	for _, id := range seen {
		unique[id] = true
	}
	if len(unique) != total {
		t.Fatalf("pages repeated records: %d unique of %d", len(unique), total)
	}
	var counted int
	if err := stores[0].read.QueryRow("SELECT sum(n) FROM record_pages WHERE business_id = ? AND object = 'notes'", biz.ID).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != total {
		t.Errorf("record_pages counts %d records, want %d", counted, total)
	}
}

func TestPragmas(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "crmd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "busy_timeout": "10000"} {
		var got string
		if err := s.conn.QueryRowContext(context.Background(), "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}
