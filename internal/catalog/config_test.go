package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lethehq/lethe/internal/catalog"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	const secret = "S3cr3t"
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"sqlite:///var/lib/lethe/lethe.db", "sqlite:///var/lib/lethe/lethe.db"},
		{"sqlite:lethe.db", "sqlite:lethe.db"},
		{"postgres://lethe@db:5432/lethe?sslmode=require", "postgres://lethe@db:5432/lethe?sslmode=require"},
		{"postgres://lethe:S3cr3t@db:5432/lethe", "postgres://lethe:xxxxx@db:5432/lethe"},
		{"postgresql://lethe:S3cr3t@db/lethe?sslmode=disable", "postgresql://lethe:xxxxx@db/lethe?sslmode=disable"},
		{"postgres://lethe:p%40ss%2FS3cr3t@db/lethe", "postgres://lethe:xxxxx@db/lethe"},
		{"postgres://db/lethe?user=lethe&password=S3cr3t&sslmode=disable", "postgres://db/lethe?user=lethe&password=xxxxx&sslmode=disable"},
		{"postgres://db/lethe?PASSWORD=S3cr3t", "postgres://db/lethe?PASSWORD=xxxxx"},
		{"postgres://db/lethe?PassWord=S3cr3t&sslpassword=S3cr3t", "postgres://db/lethe?PassWord=xxxxx&sslpassword=xxxxx"},
		{"postgres://db/lethe?pass%77ord=S3cr3t", "postgres://db/lethe?pass%77ord=xxxxx"},
		{"postgres://u:S3cr3t@db/lethe?password=S3cr3t", "postgres://u:xxxxx@db/lethe?password=xxxxx"},
		{"host=db user=lethe password=S3cr3t dbname=lethe", "host=db user=lethe password=xxxxx dbname=lethe"},
		{"host=db password = S3cr3t sslmode=disable", "host=db password=xxxxx sslmode=disable"},
		{"host=db password='S3 cr\\'3t S3cr3t' sslmode=disable", "host=db password=xxxxx sslmode=disable"},
		{"host=db PASSWORD=S3cr3t", "host=db PASSWORD=xxxxx"},
		{"host=db sslpassword=S3cr3t", "host=db sslpassword=xxxxx"},
		{"host=db password='S3cr3t", "(connection string hidden: it does not parse)"},
		{"postgres:host=db?password=S3cr3t", "postgres:host=db?password=xxxxx"},
		{"lethe:S3cr3t@db/lethe", "xxxxx@db/lethe"},
		{"postgres://lethe:S3cr3t%zz@db/lethe", "postgres:(rest hidden: it does not parse)"},
		{"postgres://lethe:S3cr3t@db:port/lethe", "postgres:(rest hidden: it does not parse)"},
		{"  postgres://lethe:S3cr3t@db/lethe  ", "postgres://lethe:xxxxx@db/lethe"},
	} {
		got := catalog.RedactURL(tc.in)
		require.Equal(t, tc.want, got, "RedactURL(%q)", tc.in)
		require.NotContains(t, got, secret, "RedactURL(%q)", tc.in)
	}
}
