package sqlstore

import (
	"context"

	"github.com/lethehq/lethe/internal/catalog"
)

// CountByPhase implements catalog.Store.
func (s *Store) CountByPhase(ctx context.Context, kind string) (map[catalog.Phase]int64, error) {
	rows, err := s.b.Reader().Query(ctx, `SELECT phase, COUNT(*) FROM resources WHERE kind = $1 GROUP BY phase`, kind)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	out := map[catalog.Phase]int64{}
	for rows.Next() {
		var (
			phase string
			n     int64
		)
		if err := rows.Scan(&phase, &n); err != nil {
			return nil, s.mapErr(err)
		}
		out[catalog.Phase(phase)] = n
	}
	return out, s.mapErr(rows.Err())
}

// Kinds implements catalog.Store.
func (s *Store) Kinds(ctx context.Context) ([]string, error) {
	rows, err := s.b.Reader().Query(ctx, `SELECT kind FROM resources UNION SELECT kind FROM audit ORDER BY 1`)
	if err != nil {
		return nil, s.mapErr(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, s.mapErr(err)
		}
		out = append(out, k)
	}
	return out, s.mapErr(rows.Err())
}

// CountWork implements catalog.Store.
func (s *Store) CountWork(ctx context.Context, queue string) (catalog.WorkCounts, error) {
	now := s.clock().UnixNano()
	var c catalog.WorkCounts
	err := s.b.Reader().QueryRow(ctx, `SELECT
  COALESCE(SUM(CASE WHEN holder <> '' AND lease_expires_at > $2 THEN 1 ELSE 0 END), 0),
  COALESCE(SUM(CASE WHEN (holder = '' OR lease_expires_at <= $2) AND available_at <= $2 THEN 1 ELSE 0 END), 0),
  COALESCE(SUM(CASE WHEN holder = '' AND available_at > $2 THEN 1 ELSE 0 END), 0),
  COALESCE(SUM(CASE WHEN attempts > 1 THEN 1 ELSE 0 END), 0)
FROM work_items WHERE queue = $1`, queue, now).Scan(&c.Leased, &c.Due, &c.Waiting, &c.Retried)
	return c, s.mapErr(err)
}
