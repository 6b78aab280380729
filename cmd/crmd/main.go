// Command crmd is the CRM records service: crmd serve runs it, and the other
// subcommands are the operator's tools for businesses, API keys, rule packs
// and the database. Run crmd help for the list.
package main

import "github.com/crmd/crmd/cmd/crmd/cli"

func main() { cli.Main() }
