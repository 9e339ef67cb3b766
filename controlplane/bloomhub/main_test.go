package bloomhub_test

import (
	"os"
	"testing"

	"github.com/flagedge/flagedge/controlplane/postgres"
	"github.com/flagedge/flagedge/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, postgres.Migrate)) }
