package rules

import (
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/expr-lang/expr/types"
	"go.yaml.in/yaml/v3"

	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
)

// WebhookName is the form of the names of subscriptions, webhook actions'
// endpoints and inbound webhooks: operators type them in commands.
var WebhookName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// WebhookDecl is a subscription as written.
type WebhookDecl struct {
	Name    string
	URL     string
	Events  []string
	When    *yaml.Node
	Headers *yaml.Node
	At      map[string]decl.Pos
	Pos     decl.Pos
	Path    string
}

// InboundDecl is an inbound webhook as written.
type InboundDecl struct {
	Name    string
	Object  string
	When    *yaml.Node
	MatchOn string
	Mapping *yaml.Node
	Verify  *yaml.Node
	At      map[string]decl.Pos
	Pos     decl.Pos
	Path    string
}

// A Subscription sends the events it matches to a URL.
type Subscription struct {
	Name    string
	URL     string
	Events  []string // as written, for operators
	Object  string   // the one object of its events, when its when needs one
	When    *Expr    // nil: every matching event
	Headers map[string]string
	Pos     decl.Pos
}

// Verification is how an inbound webhook checks that a request comes from
// its sender.
type Verification int

const (
	VerifyNone Verification = iota
	// VerifyStandard checks a Standard Webhooks signature.
	VerifyStandard
	// VerifyHMAC checks a hex HMAC-SHA256 of the body in a header.
	VerifyHMAC
)

// An Inbound maps the JSON posted to its URL into a record of its object.
type Inbound struct {
	Name       string
	Object     string
	When       *Expr // nil: take every payload
	MatchOn    *objects.Field
	Mapping    []*FieldValue
	Verify     Verification
	HMACHeader string
	Pos        decl.Pos
}

// SubscriptionsFor returns the subscriptions an event of an object matches,
// event being created, updated or deleted.
func (rs *Ruleset) SubscriptionsFor(object, event string) []*Subscription {
	return rs.subscribed[object+"."+event]
}

// Subscriptions returns every subscription, by name.
func (rs *Ruleset) Subscriptions() []*Subscription { return rs.subscriptions }

// Inbound returns an inbound webhook by name.
func (rs *Ruleset) Inbound(name string) (*Inbound, bool) {
	in, ok := rs.inbound[name]
	return in, ok
}

// Inbounds returns every inbound webhook, by name.
func (rs *Ruleset) Inbounds() []*Inbound {
	out := make([]*Inbound, 0, len(rs.inbound))
	for _, in := range rs.inbound {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Endpoints returns the names deliveries are sent as: every subscription's,
// and the names webhook actions give.
func (rs *Ruleset) Endpoints() []string {
	out := make([]string, 0, len(rs.endpoints))
	for n := range rs.endpoints {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var webhookKeys = []string{"name", "url", "events", "when", "headers"}

func decodeWebhook(r *decl.Reader, n *yaml.Node, path string) *WebhookDecl {
	w := &WebhookDecl{Pos: r.Pos(n), Path: path, At: map[string]decl.Pos{}}
	r.Mapping(n, path, webhookKeys, func(key string, val *yaml.Node, path string) {
		w.At[key] = r.Pos(val)
		switch key {
		case "name":
			w.Name, _ = r.String(val, path)
		case "url":
			w.URL, _ = r.String(val, path)
		case "events":
			w.Events = events(r, val, path)
		case "when":
			w.When = val
		case "headers":
			w.Headers = val
		}
	})
	return w
}

var inboundKeys = []string{"name", "object", "when", "match_on", "mapping", "verify"}

func decodeInbound(r *decl.Reader, n *yaml.Node, path string) *InboundDecl {
	in := &InboundDecl{Pos: r.Pos(n), Path: path, At: map[string]decl.Pos{}}
	r.Mapping(n, path, inboundKeys, func(key string, val *yaml.Node, path string) {
		in.At[key] = r.Pos(val)
		switch key {
		case "name":
			in.Name, _ = r.String(val, path)
		case "object":
			in.Object, _ = r.String(val, path)
		case "when":
			in.When = val
		case "match_on":
			in.MatchOn, _ = r.String(val, path)
		case "mapping":
			in.Mapping = val
		case "verify":
			in.Verify = val
		}
	})
	return in
}

// webhookName checks the name of a subscription or inbound webhook, and
// that no other of its kind has it.
func (c *compiler) webhookName(name, what string, taken map[string]decl.Pos, pos decl.Pos, path string) bool {
	switch {
	case name == "":
		c.fail(pos, path, "a %s needs a name", what)
		return false
	case !WebhookName.MatchString(name):
		c.fail(pos, decl.Join(path, "name"), "the name of a %s is lower case letters, digits, - and _, starting with a letter or digit", what)
		return false
	}
	if prev, dup := taken[name]; dup {
		c.fail(pos, decl.Join(path, "name"), "the name %s is taken by the %s at %s", name, what, prev)
		return false
	}
	taken[name] = pos
	return true
}

// checkURL checks a webhook's URL: http or https, with a host. Where it may
// connect is checked when it does (see engine/webhook).
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return fmt.Errorf("needs the URL to send to")
	case err != nil:
		return fmt.Errorf("is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("must be an http or https URL")
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("needs a host")
	case u.User != nil:
		return fmt.Errorf("must not hold a user name or password; use headers")
	}
	return nil
}

// reservedHeaders are headers that crmd sets on every delivery.
var reservedHeaders = []string{"content-type", "content-length", "host", "user-agent", "webhook-id", "webhook-timestamp", "webhook-signature"}

// Headers reads a mapping of extra header names to values.
func (c *compiler) headers(r *decl.Reader, n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	r.Mapping(n, path, nil, func(name string, v *yaml.Node, path string) {
		value, ok := r.String(v, path)
		switch {
		case !ok:
		case slices.Contains(reservedHeaders, strings.ToLower(name)):
			r.Errorf(v, path, "header %s is set by crmd", name)
		case !validHeader(name, value):
			r.Errorf(v, path, "%s: %q is not a valid header", name, value)
		default:
			out[name] = value
		}
	})
	return out
}

func validHeader(name, value string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if c <= ' ' || c >= 0x7f || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c) {
			return false
		}
	}
	return !strings.ContainsAny(value, "\r\n\x00")
}

// eventNames are the events a subscription names, past tense, by what the
// engine calls them.
var eventNames = map[string]string{"created": "create", "updated": "update", "deleted": "delete"}

func (c *compiler) compileWebhook(w *WebhookDecl, taken map[string]decl.Pos) {
	path := rulePath(w.Path, w.Name)
	ok := c.webhookName(w.Name, "webhook", taken, at(w.At, "name", w.Pos), path)
	if err := checkURL(w.URL); err != nil {
		c.fail(at(w.At, "url", w.Pos), decl.Join(path, "url"), "url %s", err)
		ok = false
	}
	r := c.reader(w.Pos.File)
	sub := &Subscription{Name: w.Name, URL: w.URL, Events: w.Events, Pos: w.Pos}
	if w.Headers != nil {
		sub.Headers = c.headers(r, w.Headers, decl.Join(path, "headers"))
		c.collect(r)
	}
	if len(w.Events) == 0 {
		c.fail(w.Pos, path, `a webhook needs events: such as deals.updated, deals.* or *`)
		return
	}
	keys := map[string]bool{}
	objs := map[string]bool{}
	for _, e := range w.Events {
		epos := at(w.At, "events", w.Pos)
		if e == "*" {
			for _, name := range c.rs.Schema.Names() {
				objs[name] = true
				for ev := range eventNames {
					keys[name+"."+ev] = true
				}
			}
			continue
		}
		obj, ev, found := strings.Cut(e, ".")
		if !found {
			c.fail(epos, decl.Join(path, "events"), "event %s is object.event, such as deals.updated, deals.* or *", e)
			ok = false
			continue
		}
		o, known := c.rs.Schema.Object(obj)
		if !known {
			c.fail(epos, decl.Join(path, "events"), "event %s: unknown object %s%s", e, obj, decl.DidYouMean(obj, c.rs.Schema.Names()))
			ok = false
			continue
		}
		objs[o.Name] = true
		if ev == "*" {
			for name := range eventNames {
				keys[o.Name+"."+name] = true
			}
			continue
		}
		if _, known := eventNames[ev]; !known {
			c.fail(epos, decl.Join(path, "events"), "event %s: the events are created, updated and deleted, or * for all%s",
				e, decl.DidYouMean(ev, []string{"created", "updated", "deleted"}))
			ok = false
			continue
		}
		keys[o.Name+"."+ev] = true
	}
	if w.When != nil {
		if len(objs) != 1 {
			c.fail(at(w.At, "when", w.Pos), decl.Join(path, "when"), "a webhook with when has the events of one object, whose record it reads")
			return
		}
		for o := range objs {
			sub.Object = o
		}
		sub.When = c.expr(w.Pos.File, w.When, decl.Join(path, "when"), &scope{obj: c.object1(sub.Object)}, reflect.Bool)
		if sub.When == nil {
			return
		}
	}
	if !ok {
		return
	}
	c.rs.subscriptions = append(c.rs.subscriptions, sub)
	c.rs.endpoints[sub.Name] = true
	ks := make([]string, 0, len(keys))
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		c.rs.subscribed[k] = append(c.rs.subscribed[k], sub)
	}
}

// inboundEnv is what inbound expressions see.
var inboundEnv = types.Map{
	"payload": types.TypeOf(map[string]any{}),
	"headers": types.TypeOf(map[string]string{}),
	"query":   types.TypeOf(map[string]string{}),
}

func (c *compiler) compileInbound(d *InboundDecl, taken map[string]decl.Pos) {
	path := rulePath(d.Path, d.Name)
	ok := c.webhookName(d.Name, "inbound webhook", taken, at(d.At, "name", d.Pos), path)
	obj, objOK := c.object(d.Object, at(d.At, "object", d.Pos), decl.Join(path, "object"))
	if !ok || !objOK {
		return
	}
	in := &Inbound{Name: d.Name, Object: obj.Name, Pos: d.Pos}
	sc := &scope{obj: obj, inbound: true}
	if d.When != nil {
		if in.When = c.expr(d.Pos.File, d.When, decl.Join(path, "when"), sc, reflect.Bool); in.When == nil {
			ok = false
		}
	}
	if d.Mapping == nil {
		c.fail(d.Pos, path, "an inbound webhook needs mapping: the record's fields, from payload, headers and query")
		return
	}
	in.Mapping = c.values(d.Pos.File, d.Mapping, decl.Join(path, "mapping"), sc, obj)
	if d.MatchOn != "" {
		mpath, mpos := decl.Join(path, "match_on"), at(d.At, "match_on", d.Pos)
		f, has := obj.Field(d.MatchOn)
		switch {
		case !has:
			c.fail(mpos, mpath, "%s has no field %s%s", obj.Name, d.MatchOn, decl.DidYouMean(d.MatchOn, obj.FieldNames()))
			ok = false
		case !f.Unique:
			c.fail(mpos, mpath, "match_on needs a unique field, so that at most one record matches: declare %s unique: true", f.Name)
			ok = false
		case !slices.ContainsFunc(in.Mapping, func(fv *FieldValue) bool { return fv.Field == f }):
			c.fail(mpos, mpath, "the mapping does not set %s, which match_on matches on", f.Name)
			ok = false
		default:
			in.MatchOn = f
		}
	}
	if d.Verify != nil {
		r := c.reader(d.Pos.File)
		vpath := decl.Join(path, "verify")
		if d.Verify.Kind == yaml.ScalarNode {
			if s, _ := r.String(d.Verify, vpath); s == "standard-webhooks" {
				in.Verify = VerifyStandard
			} else {
				r.Errorf(d.Verify, vpath, "verify is standard-webhooks, or hmac: HEADER")
			}
		} else {
			r.Mapping(d.Verify, vpath, []string{"hmac"}, func(_ string, v *yaml.Node, path string) {
				if h, okh := r.String(v, path); okh && validHeader(h, "") {
					in.Verify, in.HMACHeader = VerifyHMAC, h
				} else if okh {
					r.Errorf(v, path, "%q is not a header name", h)
				}
			})
		}
		if len(r.Errs) > 0 {
			ok = false
		}
		c.collect(r)
	}
	if ok {
		c.rs.inbound[in.Name] = in
	}
}
