// Command import-leads reads leads from a CSV file, whose header row names
// lead fields, and creates them through the crmd API, as an integration
// script would. It retries what may succeed later (a network error, a 5xx,
// a 429) with backoff, and reports each row a rule refuses with the field
// and message crmd gives. With --check it sends every row as a dry run and
// writes nothing.
//
//	CRMD_URL=http://127.0.0.1:8080 CRMD_KEY=ak_... go run ./examples/clients/import-leads leads.csv
package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	check := flag.Bool("check", false, "send each row as a dry run: check it against the business's rules, write nothing")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: import-leads [--check] FILE.csv (with CRMD_URL and CRMD_KEY set)")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	c := &client{base: os.Getenv("CRMD_URL"), key: os.Getenv("CRMD_KEY"), http: &http.Client{Timeout: 30 * time.Second}}
	ok, refused, err := importLeads(c, f, *check, os.Stdout)
	fmt.Printf("%d created, %d refused\n", ok, refused)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if refused > 0 {
		os.Exit(1)
	}
}

// importLeads creates a lead for each row of the CSV in r.
func importLeads(c *client, r io.Reader, check bool, out io.Writer) (ok, refused int, err error) {
	rows := csv.NewReader(r)
	header, err := rows.Read()
	if err != nil {
		return 0, 0, fmt.Errorf("reading the header row: %w", err)
	}
	path := "/api/v1/leads"
	if check {
		path += "?dry_run=true"
	}
	for line := 2; ; line++ {
		row, err := rows.Read()
		if err == io.EOF {
			return ok, refused, nil
		}
		if err != nil {
			return ok, refused, err
		}
		lead := map[string]string{}
		for i, name := range header {
			if i < len(row) && row[i] != "" {
				lead[name] = row[i]
			}
		}
		status, body, err := c.post(path, lead)
		if err != nil {
			return ok, refused, fmt.Errorf("line %d: %w", line, err)
		}
		var answer struct{ ID, Error, Field string }
		json.Unmarshal(body, &answer)
		switch {
		case status == http.StatusCreated || status == http.StatusOK:
			ok++
			fmt.Fprintf(out, "line %d: ok %s\n", line, answer.ID)
		case status == http.StatusUnprocessableEntity || status == http.StatusBadRequest:
			refused++
			fmt.Fprintf(out, "line %d: refused: %s (field %s)\n", line, answer.Error, answer.Field)
		default:
			return ok, refused, fmt.Errorf("line %d: status %d: %s", line, status, body)
		}
	}
}

type client struct {
	base, key string
	http      *http.Client
}

// post sends a JSON body, retrying what may succeed later.
func (c *client) post(path string, v any) (int, []byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return 0, nil, err
	}
	wait := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequest("POST", c.base+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+c.key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.http.Do(req)
		if err == nil {
			data, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
				return resp.StatusCode, data, nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if attempt == 5 {
			return 0, nil, fmt.Errorf("giving up after %d attempts: %w", attempt, err)
		}
		time.Sleep(wait)
		wait *= 2
	}
}
