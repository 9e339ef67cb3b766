package httpapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// jsonWriters are the functions that may call writeJSON: respond writes the handlers'
// answers, writeError the error shape.
var jsonWriters = map[string]bool{"respond": true, "writeError": true}

// TestOnlyRespondWritesJSON holds the package to one writer of answers: handlers return an
// answer and respond writes it. It fails when a function other than respond and writeError
// uses writeJSON (so a hand-written writeJSON tail cannot come back), and when a function that
// returns an answer takes a ResponseWriter (so a handler cannot write around respond).
func TestOnlyRespondWritesJSON(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, _ := decl.(*ast.FuncDecl)
			writer := fn != nil && jsonWriters[fn.Name.Name]
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if n.Name == "writeJSON" && !writer && (fn == nil || n != fn.Name) { // not writeJSON's own name
						t.Errorf("%s: %s uses writeJSON: return an answer and let respond write it", fset.Position(n.Pos()), funcName(fn))
					}
				case *ast.FuncType:
					if returnsAnswer(n) && takesResponseWriter(n) {
						t.Errorf("%s: %s returns an answer and takes a ResponseWriter: respond writes answers", fset.Position(n.Pos()), funcName(fn))
					}
				}
				return true
			})
		}
	}
}

func funcName(fn *ast.FuncDecl) string {
	if fn == nil {
		return "a package-level declaration"
	}
	return fn.Name.Name
}

func returnsAnswer(ft *ast.FuncType) bool {
	if ft.Results == nil {
		return false
	}
	for _, r := range ft.Results.List {
		if id, ok := r.Type.(*ast.Ident); ok && id.Name == "answer" {
			return true
		}
	}
	return false
}

func takesResponseWriter(ft *ast.FuncType) bool {
	for _, p := range ft.Params.List {
		if sel, ok := p.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "ResponseWriter" {
			return true
		}
	}
	return false
}
