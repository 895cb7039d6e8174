package sqlstore

import (
	"context"
	"strconv"
	"strings"

	"github.com/lethehq/lethe/internal/catalog"
)

// getManyChunk is how many keys one query of GetMany reads (three
// placeholders each: far under SQLite's and PostgreSQL's limits).
const getManyChunk = 256

// docsByKey is the query of the docs of the resources of keys (at most
// getManyChunk), followed by suffix (e.g. the dialect's FOR UPDATE), and
// its arguments.
func docsByKey(keys []catalog.Key, suffix string) (string, []any) {
	var b strings.Builder
	b.WriteString(`SELECT doc FROM resources WHERE (kind, namespace, name) IN (VALUES `)
	args := make([]any, 0, 3*len(keys))
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		n := 3 * i
		b.WriteString("($" + strconv.Itoa(n+1) + ", $" + strconv.Itoa(n+2) + ", $" + strconv.Itoa(n+3) + ")")
		args = append(args, k.Kind, k.Namespace, k.Name)
	}
	b.WriteString(")" + suffix)
	return b.String(), args
}

// GetMany implements catalog.Resources: one query per getManyChunk keys
// instead of one per key.
func (s *Store) GetMany(ctx context.Context, keys []catalog.Key) ([]*catalog.Resource, error) {
	out := make([]*catalog.Resource, len(keys))
	at := make(map[catalog.Key][]int, len(keys))
	for i, k := range keys {
		at[k] = append(at[k], i)
	}
	q := s.b.Reader()
	for start := 0; start < len(keys); start += getManyChunk {
		chunk := keys[start:min(start+getManyChunk, len(keys))]
		sql, args := docsByKey(chunk, "")
		rows, err := q.Query(ctx, sql, args...)
		if err != nil {
			return nil, s.mapErr(err)
		}
		for rows.Next() {
			var doc string
			if err := rows.Scan(&doc); err != nil {
				rows.Close()
				return nil, s.mapErr(err)
			}
			r, err := decodeResource(doc)
			if err != nil {
				rows.Close()
				return nil, err
			}
			for n, i := range at[r.Key()] {
				if n > 0 {
					r = clone(r) // a key asked twice gets its own copy
				}
				out[i] = r
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, s.mapErr(err)
		}
	}
	return out, nil
}
