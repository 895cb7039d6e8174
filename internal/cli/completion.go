package cli

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lethehq/lethe/internal/backup"
	"github.com/lethehq/lethe/internal/catalog"
)

// Dynamic shell completion (lethe completion bash|zsh|fish|powershell):
// kinds, resource and backup names, namespaces, storage locations and
// plugin names, read from the catalog and the configuration at each Tab.
// Completing never creates anything: without a catalog there is nothing
// to complete.

// completeCatalog opens the catalog for a completion, with the config
// file applied as a command's run applies it; nil when it cannot (no
// catalog yet, a bad configuration).
func (a *app) completeCatalog(cmd *cobra.Command) catalog.Store {
	if applyConfig(cmd.Root(), cmd, a.s.Getenv) != nil || a.init() != nil {
		return nil
	}
	if path, ok := strings.CutPrefix(a.g.store, "sqlite://"); ok {
		if _, err := os.Stat(path); err != nil {
			return nil // no catalog: do not create one to complete from it
		}
	}
	st, err := a.catalog(cmd.Context())
	if err != nil {
		return nil
	}
	return st
}

// withPrefix keeps the words that begin with prefix (in any case), sorted
// and without repeats.
func withPrefix(words []string, prefix string) []string {
	seen := map[string]bool{}
	for _, w := range words {
		if strings.HasPrefix(strings.ToLower(w), strings.ToLower(prefix)) {
			seen[w] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// kindWords are the names a KIND completes to: Lethe's own kinds'
// plurals, and the plural of every kind the catalog has held, in lower
// case (as kubectl completes resource types).
func kindWords(ctx context.Context, st catalog.Store) []string {
	var words []string
	for _, b := range builtinKinds {
		words = append(words, b.names[1])
	}
	if st == nil {
		return words
	}
	kinds, err := st.Kinds(ctx)
	if err != nil {
		return words
	}
	for _, k := range kinds {
		if slices.ContainsFunc(builtinKinds, func(b builtinKind) bool { return b.kind == k }) {
			continue // its plural is above
		}
		forms := kindForms(k)
		words = append(words, forms[len(forms)-1])
	}
	return words
}

// resourceNames are the names of kind's resources (in namespace ns when
// set).
func resourceNames(ctx context.Context, st catalog.Store, kind, ns string) []string {
	rs, err := listAll(ctx, st, catalog.ListOptions{Kind: kind, Namespace: ns})
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		names = append(names, r.Name)
	}
	return names
}

// completeKindName completes KIND, then NAME of that kind (with -n, in
// that namespace); nothing after them.
func (a *app) completeKindName(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	st := a.completeCatalog(cmd)
	ctx := cmd.Context()
	if len(args) == 0 {
		return withPrefix(kindWords(ctx, st), toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	if st == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	kind, err := resolveKind(ctx, st, args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ns, _ := cmd.Flags().GetString("namespace")
	return withPrefix(resourceNames(ctx, st, kind, ns), toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeNamespace completes -n with the namespaces of the KIND given
// (of every kind before one is).
func (a *app) completeNamespace(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	st := a.completeCatalog(cmd)
	if st == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	opts := catalog.ListOptions{}
	if len(args) > 0 {
		kind, err := resolveKind(ctx, st, args[0])
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		opts.Kind = kind
	}
	rs, err := listAll(ctx, st, opts)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var nss []string
	for _, r := range rs {
		if r.Namespace != "" {
			nss = append(nss, r.Namespace)
		}
	}
	return withPrefix(nss, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeBackups completes backup names, each once.
func (a *app) completeBackups(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	st := a.completeCatalog(cmd)
	if st == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := slices.DeleteFunc(resourceNames(cmd.Context(), st, backup.Kind, ""), func(n string) bool { return slices.Contains(args, n) })
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// oneBackup completes the one backup NAME of a command.
func (a *app) oneBackup(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return a.completeBackups(cmd, args, toComplete)
}

// completeLocations completes storage location names (--location, or
// default).
func (a *app) completeLocations(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if applyConfig(cmd.Root(), cmd, a.s.Getenv) != nil || a.init() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	set, err := a.locationSet()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, l := range set {
		if !slices.Contains(args, l.Name) {
			names = append(names, l.Name)
		}
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completePluginNames completes NAME= of a NAME=VALUE flag with the
// plugin names the catalog's backups expect (no plugin is started to
// complete).
func (a *app) completePluginNames(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	st := a.completeCatalog(cmd)
	if st == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	rs, err := listAll(cmd.Context(), st, catalog.ListOptions{Kind: backup.Kind})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, r := range rs {
		b, err := backup.FromResource(r)
		if err != nil {
			continue
		}
		for name := range b.Spec.ExpectedPlugins {
			names = append(names, name+"=")
		}
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// registerCompletions wires the completions into the command tree.
func (a *app) registerCompletions(root *cobra.Command) {
	withKindName := func(c *cobra.Command) {
		c.ValidArgsFunction = a.completeKindName
		if c.Flags().Lookup("namespace") != nil {
			_ = c.RegisterFlagCompletionFunc("namespace", a.completeNamespace)
		}
	}
	for _, path := range [][]string{{"get"}, {"describe"}, {"explain"}, {"delete"}, {"undelete"}, {"finalize"}} {
		if c, _, err := root.Find(path); err == nil && c != root {
			withKindName(c)
		}
	}
	for _, path := range [][]string{{"backup", "get"}, {"backup", "delete"}} {
		if c, _, err := root.Find(path); err == nil && c != root {
			c.ValidArgsFunction = a.completeBackups
		}
	}
	if c, _, err := root.Find([]string{"backup", "undelete"}); err == nil && c != root {
		c.ValidArgsFunction = a.oneBackup
	}
	if c, _, err := root.Find([]string{"location", "get"}); err == nil && c != root {
		c.ValidArgsFunction = a.completeLocations
	}
	if c, _, err := root.Find([]string{"audit"}); err == nil && c != root {
		_ = c.RegisterFlagCompletionFunc("kind", func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return withPrefix(kindWords(cmd.Context(), a.completeCatalog(cmd)), toComplete), cobra.ShellCompDirectiveNoFileComp
		})
	}
	for _, flag := range []string{"plugin-timeout", "retry-backoff", "retry-max-attempts"} {
		if root.PersistentFlags().Lookup(flag) != nil {
			_ = root.RegisterFlagCompletionFunc(flag, a.completePluginNames)
		}
	}
}
