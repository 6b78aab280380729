package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crmd/crmd/engine"
	_ "github.com/crmd/crmd/engine/actions"
	"github.com/crmd/crmd/httpapi"
	"github.com/crmd/crmd/objects/storetest"
	"github.com/crmd/crmd/rules"
)

// TestImport runs the script against a real crmd with the field-services
// pack, whose rules refuse web leads with free mail addresses.
func TestImport(t *testing.T) {
	ctx := context.Background()
	eng := engine.New(storetest.Open(t, "sqlite"), engine.Options{})
	b, _ := eng.CreateBusiness(ctx, "acme")
	key, _, _ := eng.CreateAPIKey(ctx, b.ID, "import")
	paths, _ := filepath.Glob("../../field-services/*.yaml")
	var files []rules.File
	for _, p := range paths {
		data, _ := os.ReadFile(p)
		files = append(files, rules.File{Name: p, Data: data})
	}
	p, errs := rules.Parse("fs", files)
	if errs != nil {
		t.Fatal(errs)
	}
	if _, err := eng.ApplyPacks(ctx, b.ID, []*rules.Pack{p}, engine.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(eng, httpapi.Options{}))
	defer srv.Close()
	csv := "first_name,last_name,email,source\nAda,Lovelace,ada@analytical.io,web\nBob,,bob@gmail.com,web\nGrace,Hopper,,referral\n"
	c := &client{base: srv.URL, key: key, http: http.DefaultClient}
	for _, check := range []bool{true, false} {
		var out bytes.Buffer
		ok, refused, err := importLeads(c, strings.NewReader(csv), check, &out)
		if err != nil || ok != 2 || refused != 1 || !strings.Contains(out.String(), "line 3: refused: web leads must give a work email address, not a free mail one (field email)") {
			t.Fatalf("check=%v: %d ok, %d refused, %v\n%s", check, ok, refused, err, out.String())
		}
	}
	r, _ := http.NewRequest("GET", srv.URL+"/api/v1/leads", nil)
	r.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	resp.Body.Close()
	if !strings.Contains(buf.String(), `"count":2`) {
		t.Errorf("after a check and an import, the leads are %s", buf.String())
	}
}
