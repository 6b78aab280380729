package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientReadsWhatServersSend runs the client against Go's HTTP server,
// which is what crmd uses, for each way it frames an answer.
func TestClientReadsWhatServersSend(t *testing.T) {
	big := `{"object":"contacts","count":2,"records":[` + strings.Repeat(`{"id":"x"},`, 5000) + `{"id":"y"}]}`
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(401)
			return
		}
		w.Write([]byte(`{"id":"abc"}`))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) }) // chunked
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Write([]byte(`{}`))
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(422)
		w.Write([]byte(`{"error":"` + r.Method + `"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := newClient(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	for range 3 { // the connection is reused, and redialled after a close
		for _, tt := range []struct {
			method, path, body string
			status             int
			want               string
		}{
			{"GET", "/small", "", 200, `{"id":"abc"}`},
			{"GET", "/big", "", 200, big},
			{"DELETE", "/empty", "", 204, ""},
			{"GET", "/close", "", 200, `{}`},
			{"PATCH", "/echo", `{"a":1}`, 422, `{"error":"PATCH"}`},
		} {
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			status, got, err := c.roundTrip(tt.method, tt.path, body)
			if err != nil || status != tt.status || string(got) != tt.want {
				t.Fatalf("%s %s = %d %.60q %v; want %d %.60q", tt.method, tt.path, status, got, err, tt.status, tt.want)
			}
		}
	}
	a, err := parseAnswer([]byte(big), false)
	if err != nil || a.Count == nil || *a.Count != 2 || a.Records != nil {
		t.Errorf("parseAnswer(big page) = %+v, %v", a, err)
	}
	if _, err := parseAnswer([]byte(big[:len(big)-1]), false); err == nil {
		t.Error("parseAnswer accepted a page cut short")
	}
}
