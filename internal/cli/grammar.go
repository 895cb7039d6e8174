package cli

import "github.com/spf13/cobra"

// grammarFooter ends every command's --help: how flags, kinds and names
// combine, and what the exit codes mean, the same for every command (the
// README's table says it at length).
const grammarFooter = `
Grammar, the same for every command:
  lethe COMMAND [KIND] [NAME ...] [flags]    flags go anywhere after COMMAND
  KIND          any case, singular or plural, or a short name (bk: backups)
  NAME          one or more names after KIND; or -f FILE|DIR|- (what manifests name)
  -n, --namespace NS     the namespace of a namespaced KIND (none: cluster-scoped)
  -l, --selector SEL     selects by labels, e.g. app=shop,env!=dev (never sets them)
  --labels a=b,c=d       sets labels (backup create)
  -o, --output FORMAT    table, wide, json, yaml, name or jsonpath=TEMPLATE
  --version              the version (as 'lethe version'); -v is not taken

Exit codes: 0 done; 1 error; 2 bad usage or invalid input (nothing changed);
3 incomplete (items failed or blocked, a stuck cascade); 4 not found or purged;
5 refused (nothing changed); 130 interrupted (progress saved).
`

// addGrammarFooter appends grammarFooter to the usage of root and, as
// cobra's commands inherit their parent's template, of every command.
func addGrammarFooter(root *cobra.Command) {
	root.SetUsageTemplate(root.UsageTemplate() + grammarFooter)
}
