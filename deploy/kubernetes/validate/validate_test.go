package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The manifests of this repository.
const manifests = ".."

func TestRepositoryManifests(t *testing.T) {
	set, errs := Load(manifests)
	if set != nil {
		errs = append(errs, set.Check()...)
	}
	for _, err := range errs {
		t.Error(err)
	}
	if set == nil {
		return
	}
	kinds := map[string]int{}
	for _, o := range set.Objects {
		kinds[o.Kind]++
	}
	t.Logf("%d objects: %v", len(set.Objects), kinds)
	// What the deployment needs, so that deleting a manifest cannot pass unnoticed.
	for kind, want := range map[string]int{
		"Namespace": 1, "Deployment": 1, "StatefulSet": 1, "Service": 4, "PodDisruptionBudget": 2,
		"HorizontalPodAutoscaler": 1, "ServiceMonitor": 1, "Secret": 3, "ConfigMap": 1,
	} {
		if kinds[kind] != want {
			t.Errorf("%d %s objects, want %d", kinds[kind], kind, want)
		}
	}
}

// TestBrokenManifests breaks a copy of the manifests one way at a time and expects the
// validator to say so: each check can fail.
func TestBrokenManifests(t *testing.T) {
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"unknown field", "controlplane.yaml", "  replicas: 2\n", "  replicas: 2\n  replica: 3\n", `unknown field "spec.replica"`},
		{"misplaced field", "edge.yaml", "          imagePullPolicy: IfNotPresent\n", "          imagePullPolicy: IfNotPresent\n          storage: 2Gi\n", `unknown field "spec.template.spec.containers[0].storage"`},
		{"duplicate field", "controlplane.yaml", "  revisionHistoryLimit: 5\n", "  revisionHistoryLimit: 5\n  revisionHistoryLimit: 6\n", `key "revisionHistoryLimit" already set`},
		{"wrong type", "controlplane.yaml", "  replicas: 2\n", "  replicas: two\n", "cannot unmarshal string"},
		{"bad quantity", "edge.yaml", "storage: 2Gi", "storage: 2 gigs", "quantities must match"},
		{"unknown kind", "edge.yaml", "apiVersion: autoscaling/v2\n", "apiVersion: autoscaling/v3\n", "no kind"},
		{"ServiceMonitor unknown field", "servicemonitor.yaml", "      interval: 30s\n", "      intervall: 30s\n", `unknown field "spec.endpoints[0].intervall"`},
		{"kustomization unknown field", "kustomization.yaml", "namespace: flagedge\n", "namespace: flagedge\nnamespaces: [x]\n", `unknown field "namespaces"`},
		{"kustomization missing resource", "kustomization.yaml", "  - edge.yaml\n", "  - edges.yaml\n", "edges.yaml does not exist"},
		{"file not applied", "kustomization.yaml", "  - servicemonitor.yaml\n", "", "servicemonitor.yaml: not listed"},
		{"selector mismatch", "controlplane.yaml", "    matchLabels:\n      app.kubernetes.io/name: flagedge\n      app.kubernetes.io/component: controlplane\n  strategy", "    matchLabels:\n      app.kubernetes.io/name: flagedge\n      app.kubernetes.io/component: control-plane\n  strategy", "selector does not match"},
		{"readiness path", "edge.yaml", "path: /_ready", "path: /ready", "readiness probe checks /ready"},
		{"liveness path", "controlplane.yaml", "path: /_health", "path: /healthz", "liveness probe checks /healthz"},
		{"probe port", "edge.yaml", "              path: /_health\n              port: http", "              path: /_health\n              port: web", "liveness probe port web"},
		{"secret name", "controlplane.yaml", "                  name: flagedge-database\n", "                  name: flagedge-db\n", "Secret flagedge-db is not in the manifests"},
		{"secret key", "edge.yaml", "key: FLAGEDGE_EDGE_TOKEN", "key: token", "Secret flagedge-edge-token has no key token"},
		{"secret volume", "controlplane.yaml", "secretName: flagedge-controlplane-grpc-tls", "secretName: grpc-tls", "Secret grpc-tls is not in the manifests"},
		{"configmap volume", "edge.yaml", "            name: flagedge-ca\n", "            name: ca\n", "ConfigMap ca is not in the manifests"},
		{"service targetPort", "controlplane.yaml", "      port: 9000\n      targetPort: grpc\n      appProtocol: grpc\n    - name: metrics", "      port: 9000\n      targetPort: grcp\n      appProtocol: grpc\n    - name: metrics", "targetPort grcp is not a container port"},
		{"service selector", "edge.yaml", "  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: flagedge\n    app.kubernetes.io/component: edge", "  type: ClusterIP\n  selector:\n    app.kubernetes.io/name: flagedge\n    app.kubernetes.io/component: edges", "matches no workload"},
		{"data dir not on a volume", "edge.yaml", "mountPath: /var/lib/flagedge/edge", "mountPath: /data", "FLAGEDGE_DATA_DIR=/var/lib/flagedge/edge is not under a volume mount"},
		{"data dir read-only", "edge.yaml", "            - name: data\n              mountPath: /var/lib/flagedge/edge\n", "            - name: data\n              mountPath: /var/lib/flagedge/edge\n              readOnly: true\n", "on a read-only mount"},
		{"mount without volume", "edge.yaml", "            - name: data\n", "            - name: spool\n", "volumeMount spool names no volume"},
		{"no memory limit", "edge.yaml", "            limits:\n              memory: 512Mi\n", "", "no memory limit"},
		{"no cpu request", "controlplane.yaml", "              cpu: 200m\n", "", "no cpu request"},
		{"GOMEMLIMIT without limit", "controlplane.yaml", "            limits:\n              memory: 1Gi\n", "", "GOMEMLIMIT: limits.memory is not set"},
		{"root", "edge.yaml", "        runAsNonRoot: true\n", "        runAsNonRoot: false\n", "runAsNonRoot"},
		{"writable root", "controlplane.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem"},
		{"service links", "edge.yaml", "enableServiceLinks: false", "enableServiceLinks: true", "enableServiceLinks"},
		{"secret unreadable", "controlplane.yaml", "        fsGroup: 65532\n", "", "unless the pod sets fsGroup"},
		{"image not pinned", "edge.yaml", "image: flagedge\n", "image: flagedge-edge\n", `image "flagedge-edge" is not set by kustomization.yaml`},
		{"image tag latest", "kustomization.yaml", `newTag: "0.1.0"`, `newTag: latest`, "needs a fixed newTag"},
		{"HPA target", "edge.yaml", "    kind: StatefulSet\n    name: flagedge-edge\n", "    kind: Deployment\n    name: flagedge-edge\n", "scaleTargetRef apps/v1 Deployment/flagedge-edge is not in the manifests"},
		{"HPA and replicas", "edge.yaml", "  serviceName: flagedge-edge-headless\n", "  serviceName: flagedge-edge-headless\n  replicas: 3\n", "every apply would reset"},
		{"one control-plane replica", "controlplane.yaml", "  replicas: 2\n", "  replicas: 1\n", "minAvailable 1 with 1 replicas"},
		{"PDB selector", "edge.yaml", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: flagedge\n      app.kubernetes.io/component: edge", "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: flagedge\n      app.kubernetes.io/component: edgy", "covered by 0 PodDisruptionBudgets"},
		{"StatefulSet service", "edge.yaml", "serviceName: flagedge-edge-headless", "serviceName: flagedge-edge", "must be a headless Service"},
		{"ServiceMonitor port", "servicemonitor.yaml", "    - port: metrics\n", "    - port: metric\n", `endpoint port "metric" is not a port of Service`},
		{"ServiceMonitor selector", "servicemonitor.yaml", `flagedge.io/metrics: "true"`, `flagedge.io/metrics: "yes"`, "selector matches no Service"},
		{"secret applied", "kustomization.yaml", "  - namespace.yaml\n", "  - namespace.yaml\n  - secrets.example.yaml\n", "holds placeholders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyManifests(t)
			path := filepath.Join(dir, tc.file)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// The mutation must apply exactly where intended: a test that changes nothing
			// would pass for the wrong reason.
			if n := strings.Count(string(raw), tc.old); n < 1 {
				t.Fatalf("%s does not contain %q", tc.file, tc.old)
			}
			broken := strings.Replace(string(raw), tc.old, tc.new, 1)
			if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
				t.Fatal(err)
			}
			errs := Dir(dir)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("no error containing %q; got %d:", tc.want, len(errs))
			for _, err := range errs {
				t.Log("  ", err)
			}
		})
	}
}

func copyManifests(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob(filepath.Join(manifests, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifests, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
