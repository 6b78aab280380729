package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
)

func migrate(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	db := dbFlag(fs)
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	_, done, err := openEngine(ctx, c, *db)
	if err != nil {
		return err
	}
	done()
	fmt.Fprintln(c.stderr, "the database schema is up to date")
	return nil
}

func businessCreate(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("business create", flag.ContinueOnError)
	db := dbFlag(fs)
	pos, err := c.parseArgs(fs, args, "NAME")
	if err != nil {
		return err
	}
	eng, done, err := openEngine(ctx, c, *db)
	if err != nil {
		return err
	}
	defer done()
	b, err := eng.CreateBusiness(ctx, pos[0])
	if errors.Is(err, objects.ErrConflict) {
		return fmt.Errorf("a business named %q already exists", pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, b.ID)
	fmt.Fprintf(c.stderr, "created business %q; next: crmd key create --business %q\n", b.Name, b.Name)
	return nil
}

func businessList(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("business list", flag.ContinueOnError)
	db := dbFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	eng, done, err := openEngine(ctx, c, *db)
	if err != nil {
		return err
	}
	defer done()
	bs, err := eng.Businesses(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		type row struct {
			ID        string    `json:"id"`
			Name      string    `json:"name"`
			CreatedAt time.Time `json:"created_at"`
		}
		rows := make([]row, 0, len(bs))
		for _, b := range bs {
			rows = append(rows, row{b.ID, b.Name, b.CreatedAt})
		}
		return printJSON(c, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tCREATED")
	for _, b := range bs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", b.ID, b.Name, b.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

// businessArg opens the engine and finds the business named by --business.
func businessArg(ctx context.Context, c *cli, db, ref string) (*engine.Engine, *objects.Business, func(), error) {
	if ref == "" {
		return nil, nil, nil, fmt.Errorf("%w: --business is required", errUsage)
	}
	eng, done, err := openEngine(ctx, c, db)
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := eng.Business(ctx, ref)
	if errors.Is(err, objects.ErrNotFound) {
		done()
		return nil, nil, nil, fmt.Errorf("no business named %q (crmd business list shows them)", ref)
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return eng, b, done, nil
}

func keyCreate(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("key create", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	name := fs.String("name", "", "a label for the key")
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	key, k, err := eng.CreateAPIKey(ctx, b.ID, *name)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, key)
	fmt.Fprintf(c.stderr, "created API key %s (%s…) for business %q; it is shown this once, so store it now\n", k.ID, k.Prefix, b.Name)
	return nil
}

func keyList(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("key list", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := c.parseArgs(fs, args); err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	keys, err := eng.APIKeys(ctx, b.ID)
	if err != nil {
		return err
	}
	if *asJSON {
		type row struct {
			ID         string     `json:"id"`
			Name       string     `json:"name"`
			Prefix     string     `json:"prefix"`
			CreatedAt  time.Time  `json:"created_at"`
			LastUsedAt *time.Time `json:"last_used_at"`
			RevokedAt  *time.Time `json:"revoked_at"`
		}
		rows := make([]row, 0, len(keys))
		for _, k := range keys {
			rows = append(rows, row{k.ID, k.Name, k.Prefix, k.CreatedAt, timeOrNil(k.LastUsedAt), timeOrNil(k.RevokedAt)})
		}
		return printJSON(c, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tPREFIX\tCREATED\tLAST USED\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, orDash(k.Name), k.Prefix, k.CreatedAt.Format(time.RFC3339),
			timeOrDash(k.LastUsedAt), timeOrDash(k.RevokedAt))
	}
	return tw.Flush()
}

func keyRevoke(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("key revoke", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	pos, err := c.parseArgs(fs, args, "KEY_ID")
	if err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	err = eng.RevokeAPIKey(ctx, b.ID, pos[0])
	if errors.Is(err, objects.ErrNotFound) {
		return fmt.Errorf("business %q has no key with id %s (crmd key list shows them)", b.Name, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "revoked API key %s of business %q\n", pos[0], b.Name)
	return nil
}

func printJSON(c *cli, v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func timeOrDash(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
