package httpapi

import (
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

func (a *api) list(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p engine.Principal) {
	if _, err := a.eng.Object(p.BusinessID, ps.ByName("object")); err != nil {
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
	obj, recs, err := a.eng.List(r.Context(), p.BusinessID, ps.ByName("object"), int(limit), int(offset))
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

func (a *api) get(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p engine.Principal) {
	if _, err := a.eng.Object(p.BusinessID, ps.ByName("object")); err != nil {
		a.writeError(w, r, err)
		return
	}
	if _, err := query(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	obj, rec, err := a.eng.Get(r.Context(), p.BusinessID, ps.ByName("object"), ps.ByName("id"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, obj.AppendJSON(nil, rec))
}

func (a *api) create(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p engine.Principal) {
	a.write(w, r, engine.WriteRequest{BusinessID: p.BusinessID, Object: ps.ByName("object"), Op: engine.Create})
}

func (a *api) update(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p engine.Principal) {
	a.write(w, r, engine.WriteRequest{BusinessID: p.BusinessID, Object: ps.ByName("object"), Op: engine.Update, ID: ps.ByName("id")})
}

func (a *api) remove(w http.ResponseWriter, r *http.Request, ps httprouter.Params, p engine.Principal) {
	a.write(w, r, engine.WriteRequest{BusinessID: p.BusinessID, Object: ps.ByName("object"), Op: engine.Delete, ID: ps.ByName("id")})
}

// write is the one handler step for every write: check the object, read the
// body, hand the write to the engine, and answer with what it stored.
func (a *api) write(w http.ResponseWriter, r *http.Request, req engine.WriteRequest) {
	obj, err := a.eng.Object(req.BusinessID, req.Object)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if _, err := query(r); err != nil {
		a.writeError(w, r, err)
		return
	}
	if req.Op != engine.Delete {
		if req.Fields, err = readObject(w, r, a.maxBody); err != nil {
			a.writeError(w, r, err)
			return
		}
	}
	rec, err := a.eng.Write(r.Context(), req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	switch req.Op {
	case engine.Create:
		w.Header().Set("Location", "/api/v1/"+obj.Name+"/"+rec.ID)
		writeJSON(w, http.StatusCreated, obj.AppendJSON(nil, rec))
	case engine.Update:
		writeJSON(w, http.StatusOK, obj.AppendJSON(nil, rec))
	case engine.Delete:
		w.WriteHeader(http.StatusNoContent)
	}
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
