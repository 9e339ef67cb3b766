// Package validate checks the Kubernetes manifests in deploy/kubernetes without a cluster:
// every document is decoded strictly into the real API types (k8s.io/api and the
// prometheus-operator's ServiceMonitor), so an unknown, misplaced or duplicated field or a
// value of the wrong type fails, and then the objects are checked against each other:
// selectors, ports, probes, Secrets and ConfigMaps, volumes, the autoscaler's and the
// disruption budgets' targets, and the kustomization that applies them.
//
// It is its own Go module so that k8s.io/api stays out of flagedge's build.
package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Object is one decoded manifest document.
type Object struct {
	File string // base name of the file it came from
	Kind string
	Name string
	Obj  runtime.Object
	// Example objects (from *.example.yaml) are not applied by the kustomization; they
	// document what the operator creates and satisfy references to Secrets and ConfigMaps.
	Example bool
}

func (o Object) String() string { return fmt.Sprintf("%s: %s/%s", o.File, o.Kind, o.Name) }

// kustomization is the subset of kustomize's Kustomization that these manifests use. It is
// decoded strictly too: a field outside this subset is an error, not silently ignored.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images"`
}

// Set is every object of a manifest directory.
type Set struct {
	Objects []Object
	kust    kustomization
}

var decoder runtime.Decoder

func init() {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, monitoringv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	// Strict: unknown and duplicate fields are errors (the API server would drop or warn).
	decoder = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
}

// Dir loads and checks a manifest directory; it returns every problem found.
func Dir(dir string) []error {
	set, errs := Load(dir)
	if set != nil {
		errs = append(errs, set.Check()...)
	}
	return errs
}

// Load decodes kustomization.yaml and every *.yaml file of dir.
func Load(dir string) (*Set, []error) {
	var errs []error
	set := &Set{}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, []error{err}
	}
	if err := yaml.UnmarshalStrict(raw, &set.kust); err != nil {
		return nil, []error{fmt.Errorf("kustomization.yaml: %w", err)}
	}
	if set.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || set.kust.Kind != "Kustomization" {
		errs = append(errs, fmt.Errorf("kustomization.yaml: apiVersion/kind %s/%s", set.kust.APIVersion, set.kust.Kind))
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, []error{err}
	}
	var present []string
	for _, path := range files {
		name := filepath.Base(path)
		if name == "kustomization.yaml" {
			continue
		}
		present = append(present, name)
		example := strings.HasSuffix(name, ".example.yaml")
		if !example && !slices.Contains(set.kust.Resources, name) {
			errs = append(errs, fmt.Errorf("%s: not listed in kustomization.yaml resources (name it *.example.yaml if it is not to be applied)", name))
		}
		objs, err := decodeFile(path)
		if err != nil {
			errs = append(errs, err)
		}
		for i := range objs {
			objs[i].Example = example
		}
		set.Objects = append(set.Objects, objs...)
	}
	for _, r := range set.kust.Resources {
		if !slices.Contains(present, r) {
			errs = append(errs, fmt.Errorf("kustomization.yaml: resource %s does not exist", r))
		}
		if strings.HasSuffix(r, ".example.yaml") {
			errs = append(errs, fmt.Errorf("kustomization.yaml: %s holds placeholders and must not be applied", r))
		}
	}
	return set, errs
}

func decodeFile(path string) ([]Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	name := filepath.Base(path)
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var objs []Object
	var errs []error
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return objs, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if isEmpty(doc) {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: document %d: %w", name, i, err))
			continue
		}
		meta, ok := obj.(metav1.Object)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: document %d: %s has no metadata", name, i, gvk.Kind))
			continue
		}
		objs = append(objs, Object{File: name, Kind: gvk.Kind, Name: meta.GetName(), Obj: obj})
	}
	return objs, errors.Join(errs...)
}

// isEmpty reports whether a YAML document holds only comments and blank lines.
func isEmpty(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}

// workload is a Deployment or a StatefulSet, reduced to what the checks need.
type workload struct {
	Object
	selector  *metav1.LabelSelector
	template  *corev1.PodTemplateSpec
	replicas  *int32
	claims    []string // StatefulSet volumeClaimTemplates
	headless  string   // StatefulSet serviceName
	scaledBy  *autoscalingv2.HorizontalPodAutoscaler
	budgetsBy []string
}

func (w *workload) matches(sel *metav1.LabelSelector) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return false
	}
	return s.Matches(labels.Set(w.template.Labels))
}

func (w *workload) containerPort(port intstr.IntOrString) bool {
	for _, c := range w.template.Spec.Containers {
		for _, p := range c.Ports {
			if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
				return true
			}
		}
	}
	return false
}

// Check cross-checks the loaded objects and returns every problem.
func (s *Set) Check() []error {
	var errs []error
	fail := func(o fmt.Stringer, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", o, fmt.Sprintf(format, args...)))
	}

	secrets := map[string]map[string]bool{}
	configMaps := map[string]map[string]bool{}
	services := map[string]*corev1.Service{}
	var workloads []*workload
	var namespaces []string
	for _, o := range s.Objects {
		if o.Name == "" {
			fail(o, "no metadata.name")
		}
		if meta := o.Obj.(metav1.Object); meta.GetLabels()["app.kubernetes.io/part-of"] != "flagedge" {
			fail(o, "no label app.kubernetes.io/part-of: flagedge")
		}
		switch obj := o.Obj.(type) {
		case *corev1.Secret:
			keys := map[string]bool{}
			for k := range obj.Data {
				keys[k] = true
			}
			for k := range obj.StringData {
				keys[k] = true
			}
			secrets[o.Name] = keys
			if !o.Example {
				fail(o, "Secrets belong in *.example.yaml: applying the directory must not overwrite real credentials")
			}
		case *corev1.ConfigMap:
			keys := map[string]bool{}
			for k := range obj.Data {
				keys[k] = true
			}
			configMaps[o.Name] = keys
		case *corev1.Service:
			services[o.Name] = obj
		case *corev1.Namespace:
			namespaces = append(namespaces, o.Name)
		case *appsv1.Deployment:
			workloads = append(workloads, &workload{Object: o, selector: obj.Spec.Selector, template: &obj.Spec.Template, replicas: obj.Spec.Replicas})
		case *appsv1.StatefulSet:
			w := &workload{Object: o, selector: obj.Spec.Selector, template: &obj.Spec.Template, replicas: obj.Spec.Replicas, headless: obj.Spec.ServiceName}
			for _, c := range obj.Spec.VolumeClaimTemplates {
				w.claims = append(w.claims, c.Name)
			}
			workloads = append(workloads, w)
		}
	}
	if s.kust.Namespace == "" {
		errs = append(errs, errors.New("kustomization.yaml: no namespace"))
	} else if !slices.Contains(namespaces, s.kust.Namespace) {
		errs = append(errs, fmt.Errorf("kustomization.yaml: namespace %s is not among the resources", s.kust.Namespace))
	}
	images := map[string]bool{}
	for _, img := range s.kust.Images {
		if img.NewTag == "" && img.Digest == "" || img.NewTag == "latest" {
			errs = append(errs, fmt.Errorf("kustomization.yaml: image %s needs a fixed newTag or digest", img.Name))
		}
		images[img.Name] = true
	}

	for _, w := range workloads {
		if w.selector == nil || !w.matches(w.selector) {
			fail(w, "selector does not match the pod template's labels %v", w.template.Labels)
		}
		errs = append(errs, s.checkPod(w, secrets, configMaps, images)...)
	}

	for name, svc := range services {
		o := s.find("Service", name)
		if len(svc.Spec.Selector) == 0 {
			fail(o, "no selector")
			continue
		}
		sel := &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}
		var targets []*workload
		for _, w := range workloads {
			if w.matches(sel) {
				targets = append(targets, w)
			}
		}
		if len(targets) == 0 {
			fail(o, "selector %v matches no workload's pods", svc.Spec.Selector)
		}
		for _, p := range svc.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			for _, w := range targets {
				if !w.containerPort(target) {
					fail(o, "port %s: targetPort %s is not a container port of %s", p.Name, target.String(), w.Name)
				}
			}
		}
	}

	for _, o := range s.Objects {
		switch obj := o.Obj.(type) {
		case *policyv1.PodDisruptionBudget:
			n := 0
			for _, w := range workloads {
				if w.matches(obj.Spec.Selector) {
					n++
					w.budgetsBy = append(w.budgetsBy, o.Name)
					if min := obj.Spec.MinAvailable; min != nil && min.Type == intstr.Int {
						if replicas := w.minReplicas(); min.IntVal >= replicas {
							fail(o, "minAvailable %d with %d replicas of %s blocks every node drain", min.IntVal, replicas, w.Name)
						}
					}
				}
			}
			if n == 0 {
				fail(o, "selector matches no workload's pods")
			}
		case *autoscalingv2.HorizontalPodAutoscaler:
			ref := obj.Spec.ScaleTargetRef
			var target *workload
			for _, w := range workloads {
				if w.Kind == ref.Kind && w.Name == ref.Name && ref.APIVersion == "apps/v1" {
					target = w
				}
			}
			if target == nil {
				fail(o, "scaleTargetRef %s %s/%s is not in the manifests", ref.APIVersion, ref.Kind, ref.Name)
				continue
			}
			target.scaledBy = obj
			if obj.Spec.MinReplicas == nil || *obj.Spec.MinReplicas < 2 || *obj.Spec.MinReplicas > obj.Spec.MaxReplicas {
				fail(o, "want 2 <= minReplicas <= maxReplicas")
			}
			for _, m := range obj.Spec.Metrics {
				if m.Type != autoscalingv2.ResourceMetricSourceType || m.Resource == nil {
					continue
				}
				for _, c := range target.template.Spec.Containers {
					if _, ok := c.Resources.Requests[m.Resource.Name]; !ok {
						fail(o, "scales on %s utilisation, but container %s of %s requests no %s", m.Resource.Name, c.Name, target.Name, m.Resource.Name)
					}
				}
			}
		case *monitoringv1.ServiceMonitor:
			sel, err := metav1.LabelSelectorAsSelector(&obj.Spec.Selector)
			if err != nil || sel.Empty() {
				fail(o, "bad or empty selector")
				continue
			}
			n := 0
			for name, svc := range services {
				if !sel.Matches(labels.Set(svc.Labels)) {
					continue
				}
				n++
				for _, ep := range obj.Spec.Endpoints {
					if ep.Port == "" || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
						fail(o, "endpoint port %q is not a port of Service %s", ep.Port, name)
					}
				}
			}
			if n == 0 {
				fail(o, "selector matches no Service")
			}
		}
	}

	for _, w := range workloads {
		if len(w.budgetsBy) != 1 {
			fail(w, "covered by %d PodDisruptionBudgets %v, want exactly one", len(w.budgetsBy), w.budgetsBy)
		}
		switch {
		case w.scaledBy != nil && w.replicas != nil:
			fail(w, "has replicas and a HorizontalPodAutoscaler: every apply would reset the autoscaler's count")
		case w.scaledBy == nil && (w.replicas == nil || *w.replicas < 2):
			fail(w, "want at least 2 replicas (or a HorizontalPodAutoscaler)")
		}
		if w.Kind == "StatefulSet" {
			svc, ok := services[w.headless]
			switch {
			case !ok:
				fail(w, "serviceName %q is not a Service in the manifests", w.headless)
			case svc.Spec.ClusterIP != corev1.ClusterIPNone:
				fail(w, "serviceName %s must be a headless Service (clusterIP: None)", w.headless)
			case !w.matches(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector}):
				fail(w, "its headless Service %s does not select its pods", w.headless)
			}
		}
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

func (w *workload) minReplicas() int32 {
	if w.scaledBy != nil && w.scaledBy.Spec.MinReplicas != nil {
		return *w.scaledBy.Spec.MinReplicas
	}
	if w.replicas != nil {
		return *w.replicas
	}
	return 1
}

func (s *Set) find(kind, name string) Object {
	for _, o := range s.Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	return Object{Kind: kind, Name: name}
}

// checkPod checks a workload's pod template: security settings, images, resources, probes,
// and that every Secret, ConfigMap, volume and path it names exists.
func (s *Set) checkPod(w *workload, secrets, configMaps map[string]map[string]bool, images map[string]bool) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", w, fmt.Sprintf(format, args...)))
	}
	pod := w.template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		fail("pod must set runAsNonRoot: true and a non-zero runAsUser")
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		fail("pod must set seccompProfile RuntimeDefault")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		fail("automountServiceAccountToken must be false: the programs never call the Kubernetes API")
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		fail("enableServiceLinks must be false: service links inject FLAGEDGE_* variables")
	}

	volumes := map[string]bool{}
	for _, c := range w.claims {
		volumes[c] = true
	}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
		var mode *int32
		switch {
		case v.Secret != nil:
			mode = v.Secret.DefaultMode
			keys, ok := secrets[v.Secret.SecretName]
			if !ok {
				fail("volume %s: Secret %s is not in the manifests", v.Name, v.Secret.SecretName)
			}
			for _, it := range v.Secret.Items {
				if ok && !keys[it.Key] {
					fail("volume %s: Secret %s has no key %s", v.Name, v.Secret.SecretName, it.Key)
				}
			}
		case v.ConfigMap != nil:
			mode = v.ConfigMap.DefaultMode
			keys, ok := configMaps[v.ConfigMap.Name]
			if !ok {
				fail("volume %s: ConfigMap %s is not in the manifests", v.Name, v.ConfigMap.Name)
			}
			for _, it := range v.ConfigMap.Items {
				if ok && !keys[it.Key] {
					fail("volume %s: ConfigMap %s has no key %s", v.Name, v.ConfigMap.Name, it.Key)
				}
			}
		}
		// Files not readable by others are readable by a non-root program only through
		// their group, which is the pod's fsGroup.
		if mode != nil && *mode&0o004 == 0 && (psc == nil || psc.FSGroup == nil) {
			fail("volume %s: mode %#o hides its files from a non-root user unless the pod sets fsGroup", v.Name, *mode)
		}
	}

	type container struct {
		corev1.Container
		init bool
	}
	var all []container
	for _, c := range pod.InitContainers {
		all = append(all, container{c, true})
	}
	for _, c := range pod.Containers {
		all = append(all, container{c, false})
	}
	for _, c := range all {
		cf := func(format string, args ...any) { fail("container %s: %s", c.Name, fmt.Sprintf(format, args...)) }
		name, _, _ := strings.Cut(c.Image, ":")
		if !images[name] {
			cf("image %q is not set by kustomization.yaml images (its tag would be latest)", c.Image)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if _, ok := c.Resources.Requests[r]; !ok {
				cf("no %s request", r)
			}
		}
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			cf("no memory limit")
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			cf("securityContext must set allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities.drop [ALL]")
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				cf("volumeMount %s names no volume or volumeClaimTemplate", m.Name)
			}
			mounts[m.MountPath] = m
		}
		for _, e := range c.Env {
			if e.ValueFrom != nil {
				switch ref := e.ValueFrom; {
				case ref.SecretKeyRef != nil:
					if keys, ok := secrets[ref.SecretKeyRef.Name]; !ok {
						cf("env %s: Secret %s is not in the manifests", e.Name, ref.SecretKeyRef.Name)
					} else if !keys[ref.SecretKeyRef.Key] {
						cf("env %s: Secret %s has no key %s", e.Name, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
					}
				case ref.ConfigMapKeyRef != nil:
					if keys, ok := configMaps[ref.ConfigMapKeyRef.Name]; !ok {
						cf("env %s: ConfigMap %s is not in the manifests", e.Name, ref.ConfigMapKeyRef.Name)
					} else if !keys[ref.ConfigMapKeyRef.Key] {
						cf("env %s: ConfigMap %s has no key %s", e.Name, ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key)
					}
				case ref.ResourceFieldRef != nil:
					kind, res, _ := strings.Cut(ref.ResourceFieldRef.Resource, ".")
					list := c.Resources.Limits
					if kind == "requests" {
						list = c.Resources.Requests
					}
					if _, ok := list[corev1.ResourceName(res)]; !ok {
						cf("env %s: %s is not set", e.Name, ref.ResourceFieldRef.Resource)
					}
				}
				continue
			}
			// The root filesystem is read-only and holds no configuration: a path the
			// program is told about must be on a volume (and writable for its data dir).
			if !strings.HasPrefix(e.Value, "/") {
				continue
			}
			m, ok := mountFor(mounts, e.Value)
			switch {
			case !ok:
				cf("env %s=%s is not under a volume mount", e.Name, e.Value)
			case e.Name == "FLAGEDGE_DATA_DIR" && m.ReadOnly:
				cf("env %s=%s is on a read-only mount", e.Name, e.Value)
			}
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil && secrets[ef.SecretRef.Name] == nil {
				cf("envFrom: Secret %s is not in the manifests", ef.SecretRef.Name)
			}
			if ef.ConfigMapRef != nil && configMaps[ef.ConfigMapRef.Name] == nil {
				cf("envFrom: ConfigMap %s is not in the manifests", ef.ConfigMapRef.Name)
			}
		}
		if c.init {
			continue
		}
		for _, p := range []struct {
			kind, path string
			probe      *corev1.Probe
		}{{"readiness", "/_ready", c.ReadinessProbe}, {"liveness", "/_health", c.LivenessProbe}} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				cf("no %s probe (httpGet %s)", p.kind, p.path)
				continue
			}
			if p.probe.HTTPGet.Path != p.path {
				cf("%s probe checks %s, want %s", p.kind, p.probe.HTTPGet.Path, p.path)
			}
			if !w.containerPort(p.probe.HTTPGet.Port) {
				cf("%s probe port %s is not a container port", p.kind, p.probe.HTTPGet.Port.String())
			}
		}
	}
	return errs
}

// mountFor returns the mount holding path, if any.
func mountFor(mounts map[string]corev1.VolumeMount, path string) (corev1.VolumeMount, bool) {
	for dir, m := range mounts {
		if path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/") {
			return m, true
		}
	}
	return corev1.VolumeMount{}, false
}
