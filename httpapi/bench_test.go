package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/httpapi"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/storetest"
)

// BenchmarkAPI measures the handler in process, without the network, on
// each store: go test -run XXX -bench API ./httpapi (set
// CRMD_TEST_POSTGRES_URL for PostgreSQL). The load tool cmd/crmd-bench
// measures a real server over HTTP.
func BenchmarkAPI(b *testing.B) {
	for _, kind := range storetest.Kinds {
		b.Run(kind, func(b *testing.B) {
			if kind == "postgres" && os.Getenv(storetest.PostgresEnv) == "" {
				b.Skip("set " + storetest.PostgresEnv)
			}
			benchAPI(b, kind)
		})
	}
}

func benchAPI(b *testing.B, kind string) {
	ctx := context.Background()
	st := storetest.Open(b, kind)
	eng := engine.New(st, engine.Options{})
	h := httpapi.New(eng, httpapi.Options{})
	biz, err := eng.CreateBusiness(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	key, _, err := eng.CreateAPIKey(ctx, biz.ID, "")
	if err != nil {
		b.Fatal(err)
	}
	const records = 100_000
	ids := make([]string, 0, records)
	for len(ids) < records {
		err := st.Write(ctx, biz.ID, func(tx objects.Tx) error {
			for range 1000 {
				at := time.Now().UTC()
				r := &objects.Record{Object: "contacts", ID: objects.NewID(), CreatedAt: at, UpdatedAt: at, Fields: map[string]any{
					"name": "Ada Lovelace", "first_name": "Ada", "last_name": "Lovelace", "email": "ada@example.com",
					"phone": "+44 20 7946 0958", "title": "Engineer", "status": "new", "source": "web"}}
				if err := tx.Insert(ctx, r); err != nil {
					return err
				}
				ids = append(ids, r.ID)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	do := func(method, path string, body []byte) int {
		var rd *bytes.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		} else {
			rd = bytes.NewReader(nil)
		}
		req := httptest.NewRequest(method, path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	var n atomic.Int64
	cases := []struct {
		name string
		req  func(rng *rand.Rand) (string, string, []byte, int)
	}{
		{"create", func(*rand.Rand) (string, string, []byte, int) {
			body := fmt.Appendf(nil, `{"first_name":"Grace","last_name":"Hopper","email":"g%d@example.com","status":"new","source":"web"}`, n.Add(1))
			return "POST", "/api/v1/contacts", body, http.StatusCreated
		}},
		{"get", func(rng *rand.Rand) (string, string, []byte, int) {
			return "GET", "/api/v1/contacts/" + ids[rng.IntN(len(ids))], nil, http.StatusOK
		}},
		{"update", func(rng *rand.Rand) (string, string, []byte, int) {
			return "PATCH", "/api/v1/contacts/" + ids[rng.IntN(len(ids))], fmt.Appendf(nil, `{"status":"s%d"}`, n.Add(1)), http.StatusOK
		}},
		{"list", func(*rand.Rand) (string, string, []byte, int) {
			return "GET", "/api/v1/contacts?limit=100", nil, http.StatusOK
		}},
		{"deep-list", func(*rand.Rand) (string, string, []byte, int) {
			return "GET", "/api/v1/contacts?limit=100&offset=90000", nil, http.StatusOK
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16) // 32 goroutines on 2 cores, as the load tool's 32 clients
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
				for pb.Next() {
					method, path, body, want := c.req(rng)
					if got := do(method, path, body); got != want {
						b.Fatalf("%s %s: %d", method, path, got)
					}
				}
			})
		})
	}
}
