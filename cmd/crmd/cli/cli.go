// Package cli is the crmd command: crmd serve runs the service, and the
// other subcommands are the operator's tools for businesses, API keys, rule
// packs and the database. It is a package, not a main, so that a program can
// build crmd with actions of its own: register them from init and call Main
// (see examples/custom-action).
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Main runs crmd with the process's arguments and exits.
func Main() {
	os.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// cli is what every subcommand gets: its arguments and where to write.
type cli struct {
	stdout, stderr io.Writer
}

type command struct {
	name, args, help string
	run              func(ctx context.Context, c *cli, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "[--addr ADDR] [--db DB] [--max-body SIZE] [--log-format text|json] [--webhook-allow CIDRS] [--inbound-rate N] [--packs DIR --business NAME]", "run the service", serve},
		{"migrate", "[--db DB]", "bring the database schema up to date", migrate},
		{"business create", "NAME", "create a business; prints its id", businessCreate},
		{"business list", "[--json]", "list businesses", businessList},
		{"key create", "--business NAME [--name LABEL]", "create an API key; prints the key, shown this once", keyCreate},
		{"key list", "--business NAME [--json]", "list a business's API keys", keyList},
		{"key revoke", "--business NAME KEY_ID", "revoke an API key", keyRevoke},
		{"pack validate", "PATH...", "check rule packs offline; PATH is a pack file or a directory of one pack's files", packValidate},
		{"pack test", "[-v] PATH...", "run the tests packs carry, offline", packTest},
		{"pack apply", "--business NAME [--allow-drop] [--by WHO] PATH...", "store a new revision of each pack and activate them", packApply},
		{"pack list", "--business NAME [--json]", "list a business's pack revisions", packList},
		{"pack show", "--business NAME [--revision N] PACK", "print the files of a pack revision (default: the active one)", packShow},
		{"pack rollback", "--business NAME [--to N] [--allow-drop] PACK", "activate an earlier revision of a pack", packRollback},
		{"webhook list", "--business NAME [--secrets] [--json]", "list a business's webhooks, their state and, on request, secrets", webhookList},
		{"webhook deliveries", "--business NAME [--status pending|succeeded|failed] [--limit N] [--json]", "list a business's webhook deliveries, newest first", webhookDeliveries},
		{"webhook replay", "--business NAME DELIVERY_ID", "send a delivery again", webhookReplay},
		{"webhook enable", "--business NAME WEBHOOK", "enable a disabled webhook", webhookEnable},
		{"webhook disable", "--business NAME [--reason TEXT] WEBHOOK", "stop sending a webhook's deliveries; they wait until it is enabled", webhookDisable},
		{"inbound list", "--business NAME [--base-url URL] [--secrets] [--json]", "list a business's inbound webhooks and the start of their URLs", inboundList},
		{"inbound rotate", "--business NAME INBOUND", "give an inbound webhook a new URL; prints it", inboundRotate},
	}
}

// errUsage marks an error in how a command was called (exit status 2).
var errUsage = errors.New("usage")

// Run runs crmd with args (without the program name) and returns its exit
// status.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, cmd := range commands() {
		words := strings.Fields(cmd.name)
		if len(args) < len(words) || !slices.Equal(args[:len(words)], words) {
			continue
		}
		err := cmd.run(ctx, c, args[len(words):])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(stderr, "crmd %s: %v\nusage: crmd %s %s\n", cmd.name, err, cmd.name, cmd.args)
			return 2
		default:
			fmt.Fprintf(stderr, "crmd %s: %v\n", cmd.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "crmd: unknown command %q\n\n", strings.Join(args[:min(2, len(args))], " "))
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "crmd: CRM records over JSON/HTTP, with the rules each business declares.")
	fmt.Fprintln(w, "\nCommands:")
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  crmd %s %s\n      %s\n", cmd.name, cmd.args, cmd.help)
	}
	fmt.Fprintln(w, "\nEvery command takes --db (or CRMD_DB): a SQLite file path (default ./crmd.db)")
	fmt.Fprintln(w, "or a postgres:// URL.")
}

// parseFlags parses args with fs, allowing flags and positional arguments
// in any order ("key revoke KEY --business acme"); everything after "--" is
// positional. It returns the positional arguments. For -h or --help it
// prints the command's usage and returns flag.ErrHelp.
func (c *cli) parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.commandUsage(fs)
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(pos, rest...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// commandUsage prints how to call the command fs belongs to, and its flags.
func (c *cli) commandUsage(fs *flag.FlagSet) {
	for _, cmd := range commands() {
		if cmd.name == fs.Name() {
			fmt.Fprintf(c.stderr, "usage: crmd %s %s\n\n%s.\n\nFlags:\n", cmd.name, cmd.args, cmd.help)
		}
	}
	fs.SetOutput(c.stderr)
	fs.PrintDefaults()
}

// parseArgs parses args as parseFlags does and checks that the positional
// arguments are exactly those named by want, which it returns.
func (c *cli) parseArgs(fs *flag.FlagSet, args []string, want ...string) ([]string, error) {
	pos, err := c.parseFlags(fs, args)
	switch {
	case err != nil:
		return nil, err
	case len(pos) < len(want):
		return nil, fmt.Errorf("%w: missing %s", errUsage, want[len(pos)])
	case len(pos) > len(want):
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, pos[len(want)])
	}
	return pos, nil
}

// envOr returns the environment variable name, or def when it is not set.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
