package httpapi

import (
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/julienschmidt/httprouter"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
)

// DefaultPageSize is the number of records a list returns without a limit.
const DefaultPageSize = 100

func (a *api) list(w http.ResponseWriter, r *http.Request, ps httprouter.Params, v *engine.View) {
	if _, err := v.Object(ps.ByName("object")); err != nil {
		a.writeError(w, r, err)
		return
	}
	q, err := query(r, "limit", "offset")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	limit, err := intParam(q, "limit", DefaultPageSize, 1)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	offset, err := intParam(q, "offset", 0, 0)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	limit = min(limit, objects.MaxPageSize)
	obj, recs, err := v.List(r.Context(), ps.ByName("object"), int(limit), int(offset))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	b := make([]byte, 0, 256+len(recs)*512)
	b = append(b, `{"object":`...)
	b = appendJSONString(b, obj.Name)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(len(recs)), 10)
	b = append(b, `,"records":[`...)
	for i, rec := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = obj.AppendJSON(b, rec)
	}
	b = append(b, "]}"...)
	writeJSON(w, http.StatusOK, b)
}

func (a *api) get(w http.ResponseWriter, r *http.Request, ps httprouter.Params, v *engine.View) {
	if _, err := v.Object(ps.ByName("object")); err != nil {
		a.writeError(w, r, err)
		return
	}
	if _, err := query(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	obj, rec, err := v.Get(r.Context(), ps.ByName("object"), ps.ByName("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, obj.AppendJSON(nil, rec))
}

func (a *api) create(w http.ResponseWriter, r *http.Request, ps httprouter.Params, v *engine.View) {
	a.write(w, r, v, engine.WriteRequest{Object: ps.ByName("object"), Op: engine.Create})
}

func (a *api) update(w http.ResponseWriter, r *http.Request, ps httprouter.Params, v *engine.View) {
	a.write(w, r, v, engine.WriteRequest{Object: ps.ByName("object"), Op: engine.Update, ID: ps.ByName("id")})
}

func (a *api) remove(w http.ResponseWriter, r *http.Request, ps httprouter.Params, v *engine.View) {
	a.write(w, r, v, engine.WriteRequest{Object: ps.ByName("object"), Op: engine.Delete, ID: ps.ByName("id")})
}

// write is the one handler step for every write: check the object, read the
// body, hand the write to the engine, and answer with what it stored, or,
// for a dry run, with what it would have stored and which rules fired.
func (a *api) write(w http.ResponseWriter, r *http.Request, v *engine.View, req engine.WriteRequest) {
	obj, err := v.Object(req.Object)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	q, err := query(r, "dry_run")
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if req.DryRun, err = boolParam(q, "dry_run"); err != nil {
		a.writeError(w, r, err)
		return
	}
	if req.Op != engine.Delete {
		if req.Fields, err = readObject(w, r, a.maxBody); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	res, err := v.Write(r.Context(), req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	switch {
	case req.DryRun:
		writeJSON(w, http.StatusOK, dryRunBody(obj, req.Op, res))
	case req.Op == engine.Create:
		w.Header().Set("Location", "/api/v1/"+obj.Name+"/"+res.Record.ID)
		writeJSON(w, http.StatusCreated, obj.AppendJSON(nil, res.Record))
	case req.Op == engine.Update:
		writeJSON(w, http.StatusOK, obj.AppendJSON(nil, res.Record))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// dryRunBody is the answer to a dry run: the record as it would have been
// stored (null for a delete), the rules that ran, and every write.
func dryRunBody(obj *objects.Object, op engine.Op, res *engine.WriteResult) []byte {
	b := []byte(`{"dry_run":true,"operation":`)
	b = appendJSONString(b, string(op))
	b = append(b, `,"object":`...)
	b = appendJSONString(b, obj.Name)
	b = append(b, `,"record":`...)
	if res.Record != nil {
		b = obj.AppendJSON(b, res.Record)
	} else {
		b = append(b, "null"...)
	}
	trace, _ := json.Marshal(res.Trace) // a trace is strings and always encodes
	b = append(b, ',')
	b = append(b, trace[1:]...) // the trace's fields, after its opening brace
	return b
}

// boolParam reads a true/false parameter, false when absent.
func boolParam(q url.Values, name string) (bool, error) {
	s, ok := q[name]
	if !ok {
		return false, nil
	}
	switch s[0] {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badParameter(name, "%s must be true or false, not %q", name, s[0])
}

// query parses the query string, refusing parameters other than allowed and
// parameters given twice, so that a misspelt parameter is not silently
// ignored.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("malformed query string: %v", err)
	}
	for name, vals := range q {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		switch {
		case !known && len(allowed) == 0:
			return nil, badParameter(name, "unknown query parameter %s; this endpoint takes none", name)
		case !known:
			return nil, badParameter(name, "unknown query parameter %s%s", name, decl.DidYouMean(name, allowed))
		case len(vals) > 1:
			return nil, badParameter(name, "%s is given more than once", name)
		}
	}
	return q, nil
}

// intParam reads a whole-number parameter of at least least. A number too
// large for 64 bits is read as the largest one: the caller clamps a limit,
// and an offset that large is past the end of any list.
func intParam(q url.Values, name string, def, least int64) (int64, error) {
	s, ok := q[name]
	if !ok {
		return def, nil
	}
	v := s[0]
	if v == "" {
		return 0, badParameter(name, "%s must be a whole number of at least %d, not empty", name, least)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, badParameter(name, "%s must be a whole number of at least %d, not %q", name, least, v)
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		n = math.MaxInt64
	}
	if n < least {
		return 0, badParameter(name, "%s must be at least %d", name, least)
	}
	return n, nil
}
