package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crmd/crmd/objects"
)

func webhookList(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("webhook list", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	secrets := fs.Bool("secrets", false, "show each webhook's signing secret")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	eps, err := eng.Endpoints(ctx, b.ID)
	if err != nil {
		return err
	}
	// What the active packs say of each: URL and events.
	declared := map[string][2]string{}
	if v, err := eng.View(ctx, b.ID); err == nil {
		for _, s := range v.Snapshot().Rules.Subscriptions() {
			declared[s.Name] = [2]string{s.URL, strings.Join(s.Events, ",")}
		}
	}
	type row struct {
		Name           string     `json:"name"`
		URL            string     `json:"url,omitempty"`
		Events         string     `json:"events,omitempty"`
		State          string     `json:"state"`
		DisabledReason string     `json:"disabled_reason,omitempty"`
		FailingSince   *time.Time `json:"failing_since"`
		Secret         string     `json:"secret,omitempty"`
	}
	rows := make([]row, 0, len(eps))
	for _, e := range eps {
		r := row{Name: e.Name, URL: declared[e.Name][0], Events: declared[e.Name][1], State: "enabled", FailingSince: timeOrNil(e.FailingSince)}
		switch {
		case e.Disabled:
			r.State, r.DisabledReason = "disabled", e.DisabledReason
		case !e.FailingSince.IsZero():
			r.State = "failing"
		}
		if *secrets {
			r.Secret = e.Secret
		}
		rows = append(rows, r)
	}
	if *asJSON {
		return printJSON(c, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	head := "NAME\tSTATE\tFAILING SINCE\tEVENTS\tURL"
	if *secrets {
		head += "\tSECRET"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		state := r.State
		if r.DisabledReason != "" {
			state += " (" + r.DisabledReason + ")"
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.Name, state, timeOrDash(e0(r.FailingSince)), orDash(r.Events), orDash(r.URL))
		if *secrets {
			line += "\t" + r.Secret
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func e0(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func webhookDeliveries(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("webhook deliveries", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	status := fs.String("status", "", "only deliveries in this state: pending, succeeded or failed")
	limit := fs.Int("limit", 50, "how many, newest first")
	asJSON := fs.Bool("json", false, "print JSON, with the last response")
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	switch *status {
	case "", objects.DeliveryPending, objects.DeliverySucceeded, objects.DeliveryFailed:
	default:
		return fmt.Errorf("%w: --status is pending, succeeded or failed", errUsage)
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	ds, err := eng.Deliveries(ctx, b.ID, *status, max(1, *limit))
	if err != nil {
		return err
	}
	if *asJSON {
		type row struct {
			ID            string    `json:"id"`
			Webhook       string    `json:"webhook"`
			Status        string    `json:"status"`
			Attempts      int       `json:"attempts"`
			NextAttemptAt time.Time `json:"next_attempt_at"`
			LastStatus    int       `json:"last_status"`
			LastError     string    `json:"last_error"`
			LastResponse  string    `json:"last_response"`
			CreatedAt     time.Time `json:"created_at"`
			UpdatedAt     time.Time `json:"updated_at"`
		}
		rows := make([]row, 0, len(ds))
		for _, d := range ds {
			rows = append(rows, row{d.ID, d.Endpoint, d.Status, d.Attempts, d.NextAttemptAt, d.LastStatus, d.LastError,
				string(d.LastResponse), d.CreatedAt, d.UpdatedAt})
		}
		return printJSON(c, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWEBHOOK\tSTATUS\tATTEMPTS\tLAST\tNEXT\tCREATED")
	for _, d := range ds {
		last := "-"
		switch {
		case d.LastStatus != 0:
			last = fmt.Sprint(d.LastStatus)
		case d.LastError != "":
			last = d.LastError
		}
		next := "-"
		if d.Status == objects.DeliveryPending {
			next = d.NextAttemptAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.Endpoint, d.Status, d.Attempts, last, next, d.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func webhookReplay(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("webhook replay", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	pos, err := c.parseArgs(fs, args, "DELIVERY_ID")
	if err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	err = eng.ReplayDelivery(ctx, b.ID, pos[0])
	if errors.Is(err, objects.ErrNotFound) {
		return fmt.Errorf("business %q has no delivery %s (crmd webhook deliveries shows them)", b.Name, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "delivery %s is pending again; a running crmd sends it now\n", pos[0])
	return nil
}

func webhookEnable(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("webhook enable", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	pos, err := c.parseArgs(fs, args, "WEBHOOK")
	if err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	err = eng.EnableEndpoint(ctx, b.ID, pos[0])
	if errors.Is(err, objects.ErrNotFound) {
		return fmt.Errorf("business %q has no webhook %s (crmd webhook list shows them)", b.Name, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "webhook %s is enabled; its pending deliveries go out now\n", pos[0])
	return nil
}

func inboundList(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("inbound list", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	base := fs.String("base-url", "", "the URL crmd is reached at, to print whole URLs (default: paths)")
	secrets := fs.Bool("secrets", false, "show the secret each inbound webhook verifies signatures with")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	ins, err := eng.Inbounds(ctx, b.ID)
	if err != nil {
		return err
	}
	objs := map[string]string{}
	if v, err := eng.View(ctx, b.ID); err == nil {
		for _, in := range v.Snapshot().Rules.Inbounds() {
			objs[in.Name] = in.Object
		}
	}
	// The tokens themselves are not kept: a URL shows its token's first
	// characters, to tell it apart.
	type row struct {
		Name      string    `json:"name"`
		Object    string    `json:"object,omitempty"`
		URL       string    `json:"url_hint"`
		Secret    string    `json:"secret,omitempty"`
		RotatedAt time.Time `json:"rotated_at"`
	}
	rows := make([]row, 0, len(ins))
	for _, in := range ins {
		r := row{Name: in.Name, Object: objs[in.Name], URL: strings.TrimSuffix(*base, "/") + "/api/in/" + in.TokenHint + "…", RotatedAt: in.RotatedAt}
		if *secrets {
			r.Secret = in.Secret
		}
		rows = append(rows, r)
	}
	if *asJSON {
		return printJSON(c, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	head := "NAME\tOBJECT\tURL (START)\tSINCE"
	if *secrets {
		head += "\tSECRET"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%s\t%s\t%s", r.Name, orDash(r.Object), r.URL, r.RotatedAt.Format(time.RFC3339))
		if *secrets {
			line += "\t" + r.Secret
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func inboundRotate(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("inbound rotate", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	pos, err := c.parseArgs(fs, args, "INBOUND")
	if err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	token, err := eng.RotateInbound(ctx, b.ID, pos[0])
	if errors.Is(err, objects.ErrNotFound) {
		return fmt.Errorf("business %q has no inbound webhook %s (crmd inbound list shows them)", b.Name, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "/api/in/"+token)
	fmt.Fprintf(c.stderr, "inbound webhook %s has a new URL; the old one answers 404 from now on\n", pos[0])
	return nil
}

func webhookDisable(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("webhook disable", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	reason := fs.String("reason", "disabled by an operator", "why, shown by crmd webhook list")
	pos, err := c.parseArgs(fs, args, "WEBHOOK")
	if err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	err = eng.DisableEndpoint(ctx, b.ID, pos[0], *reason)
	if errors.Is(err, objects.ErrNotFound) {
		return fmt.Errorf("business %q has no webhook %s (crmd webhook list shows them)", b.Name, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "webhook %s is disabled; its deliveries wait until crmd webhook enable\n", pos[0])
	return nil
}
