package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/crmd/crmd/objects"
)

func newBusiness(t *testing.T, s objects.Store, name string) *objects.Business {
	t.Helper()
	b := &objects.Business{ID: objects.NewID(), Name: name, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	if err := s.CreateBusiness(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

func insert(t *testing.T, s objects.Store, biz, object string, fields map[string]any) *objects.Record {
	t.Helper()
	at := time.Now().UTC().Truncate(time.Microsecond)
	r := &objects.Record{Object: object, ID: objects.NewID(), CreatedAt: at, UpdatedAt: at, Fields: fields}
	if err := s.Write(context.Background(), biz, func(tx objects.Tx) error { return tx.Insert(context.Background(), r) }); err != nil {
		t.Fatal(err)
	}
	return r
}

// decode returns the stored fields of r.
func decode(t *testing.T, r *objects.Record) map[string]any {
	t.Helper()
	fields, err := objects.DecodeFields(r.Data)
	if err != nil {
		t.Fatal(err)
	}
	return fields
}

func TestRecordsCRUD(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "a")
		b := newBusiness(t, s, "b")
		r := insert(t, s, a.ID, "contacts", map[string]any{"first_name": "Ada", "employees": int64(3)})

		got, err := s.Get(ctx, a.ID, "contacts", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != r.ID || decode(t, got)["first_name"] != "Ada" || !got.CreatedAt.Equal(r.CreatedAt) || got.CreatedAt.Location() != time.UTC {
			t.Errorf("Get = %+v, want %+v", got, r)
		}
		for _, probe := range []struct{ biz, object string }{{b.ID, "contacts"}, {a.ID, "leads"}} {
			if _, err := s.Get(ctx, probe.biz, probe.object, r.ID); !errors.Is(err, objects.ErrNotFound) {
				t.Errorf("Get(%s, %s) = %v, want not found", probe.biz, probe.object, err)
			}
		}

		// Another business can neither update nor delete the record.
		err = s.Write(ctx, b.ID, func(tx objects.Tx) error {
			if _, err := tx.Get(ctx, "contacts", r.ID); !errors.Is(err, objects.ErrNotFound) {
				return fmt.Errorf("tx.Get from b = %v", err)
			}
			if err := tx.Update(ctx, &objects.Record{Object: "contacts", ID: r.ID, UpdatedAt: time.Now(), Fields: map[string]any{}}); !errors.Is(err, objects.ErrNotFound) {
				return fmt.Errorf("tx.Update from b = %v", err)
			}
			return tx.Delete(ctx, "contacts", r.ID)
		})
		if !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("delete from another business = %v, want not found", err)
		}

		later := r.UpdatedAt.Add(time.Second)
		err = s.Write(ctx, a.ID, func(tx objects.Tx) error {
			old, err := tx.Get(ctx, "contacts", r.ID)
			if err != nil {
				return err
			}
			old.Fields = decode(t, old)
			old.Fields["last_name"] = "Lovelace"
			old.UpdatedAt = later
			return tx.Update(ctx, old)
		})
		if err != nil {
			t.Fatal(err)
		}
		got, _ = s.Get(ctx, a.ID, "contacts", r.ID)
		if decode(t, got)["last_name"] != "Lovelace" || !got.UpdatedAt.Equal(later) || !got.CreatedAt.Equal(r.CreatedAt) {
			t.Errorf("after update = %+v", got)
		}

		if err := s.Write(ctx, a.ID, func(tx objects.Tx) error { return tx.Delete(ctx, "contacts", r.ID) }); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, a.ID, "contacts", r.ID); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("Get after delete = %v", err)
		}
	})
}

func TestFailedWriteChangesNothing(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "a")
		boom := errors.New("boom")
		id := objects.NewID()
		err := s.Write(ctx, a.ID, func(tx objects.Tx) error {
			at := time.Now()
			if err := tx.Insert(ctx, &objects.Record{Object: "deals", ID: id, CreatedAt: at, UpdatedAt: at, Fields: map[string]any{}}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Write = %v, want boom", err)
		}
		if _, err := s.Get(ctx, a.ID, "deals", id); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("a failed write left its record: %v", err)
		}
		if recs, _ := s.List(ctx, a.ID, "deals", 10, 0); len(recs) != 0 {
			t.Errorf("a failed write left %d records in the list", len(recs))
		}
	})
}

// TestConcurrentWritesFailAlone writes from many goroutines at once, every
// third write failing after it inserted: on SQLite they share transactions
// (group commit), and a failing write must roll back alone.
func TestConcurrentWritesFailAlone(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "a")
		const n = 300
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			kept = map[string]bool{}
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := objects.NewID()
				err := s.Write(ctx, a.ID, func(tx objects.Tx) error {
					at := time.Now()
					if err := tx.Insert(ctx, &objects.Record{Object: "tasks", ID: id, CreatedAt: at, UpdatedAt: at, Fields: map[string]any{"name": fmt.Sprint(i)}}); err != nil {
						return err
					}
					if i%3 == 0 {
						return errors.New("refused")
					}
					return nil
				})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case i%3 == 0 && err == nil:
					t.Errorf("write %d should have failed", i)
				case i%3 != 0 && err != nil:
					t.Errorf("write %d: %v", i, err)
				case err == nil:
					kept[id] = true
				}
			}()
		}
		wg.Wait()
		recs, err := s.List(ctx, a.ID, "tasks", objects.MaxPageSize, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != len(kept) {
			t.Fatalf("listed %d records, want %d", len(recs), len(kept))
		}
		for _, r := range recs {
			if !kept[r.ID] {
				t.Errorf("record %s of a failed write was kept", r.ID)
			}
		}
	})
}

// TestListPaging checks that pages at every offset are exactly the slice of
// the full list, oldest first, after deletes have punched holes in it and
// with other objects and businesses interleaved. It crosses many of the
// SQLite store's count pages.
func TestListPaging(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "a")
		b := newBusiness(t, s, "b")
		const n = 3000
		var all []string
		err := s.Write(ctx, a.ID, func(tx objects.Tx) error {
			for i := range n {
				at := time.Now()
				r := &objects.Record{Object: "notes", ID: objects.NewID(), CreatedAt: at, UpdatedAt: at, Fields: map[string]any{"name": fmt.Sprint(i)}}
				if err := tx.Insert(ctx, r); err != nil {
					return err
				}
				all = append(all, r.ID)
				if i%2 == 0 { // interleave another object
					if err := tx.Insert(ctx, &objects.Record{Object: "tasks", ID: objects.NewID(), CreatedAt: at, UpdatedAt: at, Fields: map[string]any{}}); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		insert(t, s, b.ID, "notes", map[string]any{"name": "b's"})

		rng := rand.New(rand.NewPCG(1, 2))
		var kept []string
		err = s.Write(ctx, a.ID, func(tx objects.Tx) error {
			for i, id := range all {
				if i%7 == 3 || (i > 1000 && i < 2100) || rng.IntN(10) == 0 {
					if err := tx.Delete(ctx, "notes", id); err != nil {
						return err
					}
					continue
				}
				kept = append(kept, id)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, offset := range []int{0, 1, 99, 500, 1023, 1024, 1025, len(kept) - 100, len(kept) - 1, len(kept), len(kept) + 5, 1 << 40} {
			for _, limit := range []int{1, 100, objects.MaxPageSize} {
				recs, err := s.List(ctx, a.ID, "notes", limit, offset)
				if err != nil {
					t.Fatal(err)
				}
				want := kept[min(offset, len(kept)):min(offset+limit, len(kept))]
				if len(recs) != len(want) {
					t.Fatalf("List(limit %d, offset %d) returned %d records, want %d", limit, offset, len(recs), len(want))
				}
				for i := range want {
					if recs[i].ID != want[i] {
						t.Fatalf("List(limit %d, offset %d)[%d] = %s, want %s", limit, offset, i, recs[i].ID, want[i])
					}
				}
			}
		}
	})
}

func TestBusinessesAndKeys(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		ctx := context.Background()
		s := Open(t, kind)
		a := newBusiness(t, s, "Acme")
		if err := s.CreateBusiness(ctx, &objects.Business{ID: objects.NewID(), Name: "Acme", CreatedAt: time.Now()}); !errors.Is(err, objects.ErrConflict) {
			t.Errorf("duplicate business name = %v, want conflict", err)
		}
		for _, ref := range []string{"Acme", a.ID} {
			if got, err := s.Business(ctx, ref); err != nil || got.ID != a.ID {
				t.Errorf("Business(%q) = %v, %v", ref, got, err)
			}
		}
		if _, err := s.Business(ctx, "nobody"); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("Business(nobody) = %v", err)
		}

		k := &objects.APIKey{BusinessID: a.ID, ID: objects.NewID(), Name: "ci", Prefix: "ak_12345678", Hash: []byte("0123456789abcdef0123456789abcdef"), CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
		if err := s.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		got, err := s.APIKeyByHash(ctx, k.Hash)
		if err != nil || got.ID != k.ID || got.BusinessID != a.ID || !got.LastUsedAt.IsZero() || !got.RevokedAt.IsZero() {
			t.Fatalf("APIKeyByHash = %+v, %v", got, err)
		}
		used := time.Now().UTC().Truncate(time.Microsecond)
		if err := s.TouchAPIKeys(ctx, []objects.KeyUse{{BusinessID: a.ID, KeyID: k.ID, At: used}}); err != nil {
			t.Fatal(err)
		}
		// An older use does not move the time back.
		if err := s.TouchAPIKeys(ctx, []objects.KeyUse{{BusinessID: a.ID, KeyID: k.ID, At: used.Add(-time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		revoked := used.Add(time.Minute)
		if err := s.RevokeAPIKey(ctx, a.ID, k.ID, revoked); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeAPIKey(ctx, a.ID, k.ID, revoked.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		b := newBusiness(t, s, "Other")
		if err := s.RevokeAPIKey(ctx, b.ID, k.ID, revoked); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("revoking another business's key = %v, want not found", err)
		}
		keys, err := s.APIKeys(ctx, a.ID)
		if err != nil || len(keys) != 1 {
			t.Fatalf("APIKeys = %v, %v", keys, err)
		}
		if !keys[0].LastUsedAt.Equal(used) || !keys[0].RevokedAt.Equal(revoked) {
			t.Errorf("key = %+v, want last used %v and revoked %v", keys[0], used, revoked)
		}
		if keys, _ := s.APIKeys(ctx, b.ID); len(keys) != 0 {
			t.Errorf("another business sees %d keys", len(keys))
		}
	})
}

func TestPingEmptyDatabase(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		if err := Open(t, kind).Ping(context.Background()); err != nil {
			t.Fatalf("Ping on an empty database: %v", err)
		}
	})
}

func TestReopenMigratesOnce(t *testing.T) {
	Each(t, func(t *testing.T, kind string) {
		t.Parallel()
		dsn := DSN(t, kind)
		s := OpenDSN(t, dsn)
		a := newBusiness(t, s, "a")
		r := insert(t, s, a.ID, "leads", map[string]any{"email": "x@example.com"})
		s.Close()
		s2 := OpenDSN(t, dsn)
		if _, err := s2.Get(context.Background(), a.ID, "leads", r.ID); err != nil {
			t.Fatalf("after reopening: %v", err)
		}
	})
}
