package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crmd/crmd/engine"
	"github.com/crmd/crmd/objects"
	"github.com/crmd/crmd/objects/decl"
	"github.com/crmd/crmd/objects/sqlite"
	"github.com/crmd/crmd/rules"
)

// maxPackFile bounds the size of one pack file.
const maxPackFile = 1 << 20

// packExts are the files a pack directory's pack is read from.
var packExts = []string{".yaml", ".yml", ".json"}

// readPacks reads the packs at paths: each is a pack file, or a directory
// whose YAML and JSON files are one pack. A pack is named by the pack key of
// its files, or else by the file or directory.
func readPacks(paths []string) ([]*rules.Pack, error) {
	var (
		packs []*rules.Pack
		errs  decl.Errors
	)
	for _, path := range paths {
		info, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		files := []string{path}
		name := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if info.IsDir() {
			files = nil
			name = filepath.Base(filepath.Clean(path))
			entries, err := os.ReadDir(path)
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				for _, ext := range packExts {
					if !e.IsDir() && strings.HasSuffix(e.Name(), ext) {
						files = append(files, filepath.Join(path, e.Name()))
					}
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("%s has no pack files (%s)", path, strings.Join(packExts, ", "))
			}
		}
		var pf []rules.File
		for _, f := range files {
			data, err := readFile(f)
			if err != nil {
				return nil, err
			}
			// Stored by its name in the pack, so that the same content read
			// from another directory is the same revision.
			pf = append(pf, rules.File{Name: filepath.Base(f), Path: f, Data: data})
		}
		p, perrs := rules.Parse(name, pf)
		errs = append(errs, perrs...)
		packs = append(packs, p)
	}
	if errs != nil {
		return nil, errs
	}
	return packs, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPackFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPackFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPackFile)
	}
	return data, nil
}

// printDeclErrors prints pack errors one a line and returns the error that
// ends the command.
func printDeclErrors(c *cli, err error) error {
	var de decl.Errors
	var ae *engine.ApplyError
	switch {
	case errors.As(err, &ae):
		de = ae.Errs
	case errors.As(err, &de):
	default:
		return err
	}
	for _, e := range de {
		if e.Pos.File == "" {
			fmt.Fprintln(c.stderr, e.Msg)
		} else {
			fmt.Fprintln(c.stderr, e.Error())
		}
	}
	return fmt.Errorf("%d problem(s); nothing was changed", len(de))
}

func packValidate(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("pack validate", flag.ContinueOnError)
	paths, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("%w: missing PATH", errUsage)
	}
	packs, err := readPacks(paths)
	if err != nil {
		return printDeclErrors(c, err)
	}
	rs, errs := engine.CheckPacks(packs)
	if errs != nil {
		return printDeclErrors(c, errs)
	}
	for _, p := range packs {
		fmt.Fprintf(c.stdout, "%s: ok (%d files)\n", p.Name, len(p.Files))
	}
	fmt.Fprintf(c.stdout, "%d objects, %d rules, %d tests\n", len(rs.Schema.Names()), rs.Rules(), len(rs.Tests))
	return nil
}

// packTest runs the tests packs carry, without a database or a server: on a
// private SQLite file that is removed afterwards.
func packTest(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("pack test", flag.ContinueOnError)
	verbose := fs.Bool("v", false, "list every test, not only failures")
	paths, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("%w: missing PATH", errUsage)
	}
	packs, err := readPacks(paths)
	if err != nil {
		return printDeclErrors(c, err)
	}
	dir, err := os.MkdirTemp("", "crmd-pack-test-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "test.db"), nil)
	if err != nil {
		return err
	}
	defer st.Close()
	eng := engine.New(st, engine.Options{})
	b, err := eng.CreateBusiness(ctx, "pack test")
	if err != nil {
		return err
	}
	if _, err := eng.ApplyPacks(ctx, b.ID, packs, engine.ApplyOptions{By: "crmd pack test"}); err != nil {
		return printDeclErrors(c, err)
	}
	results, err := eng.RunTests(ctx, b.ID)
	if err != nil {
		return err
	}
	// The tests ran from the stored revisions, whose files have their names
	// in the pack; show the paths they were read from.
	shown := map[string]string{}
	for _, p := range packs {
		for _, f := range p.Files {
			shown[p.Name+"/"+f.Name] = f.Display()
		}
	}
	failed := 0
	for _, r := range results {
		pos := r.Test.Pos
		if path, ok := shown[r.Test.Pack+"/"+pos.File]; ok {
			pos.File = path
		}
		switch {
		case r.Failed != "":
			failed++
			fmt.Fprintf(c.stdout, "FAIL %s: %s\n     %s\n", pos, r.Test.Name, r.Failed)
		case *verbose:
			fmt.Fprintf(c.stdout, "ok   %s: %s\n", pos, r.Test.Name)
		}
	}
	fmt.Fprintf(c.stdout, "%d tests, %d passed, %d failed\n", len(results), len(results)-failed, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d tests failed", failed, len(results))
	}
	return nil
}

// who says who applies a pack, for its revision's record.
func who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		name += "@" + h
	}
	return name
}

func packApply(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("pack apply", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	allowDrop := fs.Bool("allow-drop", false, "let the packs drop custom objects and fields that hold data (the data is kept, hidden)")
	by := fs.String("by", who(), "who applies the packs, for the record")
	paths, err := c.parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return fmt.Errorf("%w: missing PATH", errUsage)
	}
	packs, err := readPacks(paths)
	if err != nil {
		return printDeclErrors(c, err)
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	res, err := eng.ApplyPacks(ctx, b.ID, packs, engine.ApplyOptions{AllowDrop: *allowDrop, By: *by})
	if err != nil {
		return printDeclErrors(c, err)
	}
	printApplied(c, res)
	return nil
}

func printApplied(c *cli, res *engine.ApplyResult) {
	for _, a := range res.Activated {
		fmt.Fprintf(c.stdout, "%s: revision %d active\n", a.Pack, a.Revision)
	}
	for _, name := range res.Unchanged {
		fmt.Fprintf(c.stdout, "%s: unchanged\n", name)
	}
	for _, d := range res.Dropped {
		fmt.Fprintf(c.stderr, "dropped %s; its data is kept and comes back if it is declared again\n", d)
	}
	for _, in := range res.NewInbound {
		fmt.Fprintf(c.stdout, "inbound webhook %s: /api/in/%s\n", in.Name, in.Token)
	}
	if len(res.NewInbound) > 0 {
		fmt.Fprintln(c.stderr, "new inbound webhook URLs are shown this once: give them to their senders; crmd inbound rotate makes new ones")
	}
}

func packRollback(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("pack rollback", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	to := fs.Int("to", 0, "the revision to activate (default: the one before the active one)")
	allowDrop := fs.Bool("allow-drop", false, "let the rollback drop custom objects and fields that hold data (the data is kept, hidden)")
	by := fs.String("by", who(), "who rolls back, for the record")
	pos, err := c.parseArgs(fs, args, "PACK")
	if err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	res, err := eng.RollbackPack(ctx, b.ID, pos[0], *to, engine.ApplyOptions{AllowDrop: *allowDrop, By: *by})
	if err != nil {
		return printDeclErrors(c, err)
	}
	printApplied(c, res)
	return nil
}

func packList(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("pack list", flag.ContinueOnError)
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
	revs, err := eng.PackRevisions(ctx, b.ID)
	if err != nil {
		return err
	}
	if *asJSON {
		type row struct {
			Pack      string    `json:"pack"`
			Revision  int       `json:"revision"`
			Active    bool      `json:"active"`
			Hash      string    `json:"hash"`
			CreatedAt time.Time `json:"created_at"`
			CreatedBy string    `json:"created_by"`
		}
		rows := make([]row, 0, len(revs))
		for _, r := range revs {
			rows = append(rows, row{r.Pack, r.Revision, r.Active, r.Hash, r.CreatedAt, r.CreatedBy})
		}
		return printJSON(c, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PACK\tREVISION\tACTIVE\tHASH\tCREATED\tBY")
	for _, r := range revs {
		active := ""
		if r.Active {
			active = "active"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Pack, r.Revision, active, r.Hash[:12], r.CreatedAt.Format(time.RFC3339), r.CreatedBy)
	}
	return tw.Flush()
}

func packShow(ctx context.Context, c *cli, args []string) error {
	fs := flag.NewFlagSet("pack show", flag.ContinueOnError)
	db := dbFlag(fs)
	business := fs.String("business", "", "business name or id")
	revision := fs.Int("revision", 0, "the revision to show (default: the active one)")
	pos, err := c.parseArgs(fs, args, "PACK")
	if err != nil {
		return err
	}
	eng, b, done, err := businessArg(ctx, c, *db, *business)
	if err != nil {
		return err
	}
	defer done()
	rev, err := eng.PackRevision(ctx, b.ID, pos[0], *revision)
	if errors.Is(err, objects.ErrNotFound) {
		return fmt.Errorf("business %q has no such revision of pack %s (crmd pack list shows them)", b.Name, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stderr, "pack %s revision %d (%s), by %s at %s\n", rev.Pack, rev.Revision, map[bool]string{true: "active", false: "inactive"}[rev.Active],
		rev.CreatedBy, rev.CreatedAt.Format(time.RFC3339))
	for _, f := range rev.Files {
		fmt.Fprintf(c.stdout, "# file: %s\n%s", f.Name, f.Content)
		if !strings.HasSuffix(f.Content, "\n") {
			fmt.Fprintln(c.stdout)
		}
	}
	return nil
}

// watchPacks applies the pack in dir to a business now and whenever its
// files change, until ctx is done. A revision that is refused is logged and
// the last good one keeps serving.
func watchPacks(ctx context.Context, eng *engine.Engine, businessID, dir string, log *slog.Logger) {
	last := ""
	apply := func() {
		stamp, err := dirStamp(dir)
		if err != nil {
			if stamp != last {
				log.Error("watching rule packs", "dir", dir, "err", err)
			}
			last = stamp
			return
		}
		if stamp == last {
			return
		}
		last = stamp
		packs, err := readPacks([]string{dir})
		if err == nil {
			var res *engine.ApplyResult
			res, err = eng.ApplyPacks(ctx, businessID, packs, engine.ApplyOptions{By: "crmd serve --packs " + dir})
			if err == nil {
				for _, a := range res.Activated {
					log.Info("applied rule pack from "+dir, "pack", a.Pack, "revision", a.Revision)
				}
				for _, in := range res.NewInbound {
					// Never the token: logs are not for secrets.
					log.Info("new inbound webhook; crmd inbound rotate gives it a URL to use", "inbound", in.Name)
				}
				return
			}
		}
		log.Error("rule pack refused; the last good revision keeps serving", "dir", dir, "errors", err.Error())
	}
	apply()
	t := time.NewTicker(engine.PackPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			apply()
		}
	}
}

// dirStamp sums up the names, sizes and times of the pack files in dir, to
// notice changes without reading them.
func dirStamp(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "missing", err
	}
	var parts []string
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || e.IsDir() {
			continue
		}
		parts = append(parts, e.Name()+":"+strconv.FormatInt(info.Size(), 10)+":"+strconv.FormatInt(info.ModTime().UnixNano(), 10))
	}
	sort.Strings(parts)
	return strings.Join(parts, "|"), nil
}
