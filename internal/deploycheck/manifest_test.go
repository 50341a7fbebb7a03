package deploycheck

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// repoRoot is the module root, two levels above this package.
const repoRoot = "../.."

// object is one Kubernetes object, parsed loosely: only the fields the
// checks read. Unknown fields are allowed (Kubernetes has many).
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec struct {
		// Workloads.
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		// Services select with a plain map.
		ServiceSelector map[string]string `yaml:"-"`
		Ports           []servicePort     `yaml:"ports"`
	} `yaml:"spec"`
	file string
	raw  map[string]any
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort any    `yaml:"targetPort"`
}

type podSpec struct {
	SecurityContext *securityContext `yaml:"securityContext"`
	Containers      []container      `yaml:"containers"`
	InitContainers  []container      `yaml:"initContainers"`
}

type securityContext struct {
	RunAsNonRoot             *bool `yaml:"runAsNonRoot"`
	RunAsUser                *int  `yaml:"runAsUser"`
	ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe   *probe           `yaml:"livenessProbe"`
	ReadinessProbe  *probe           `yaml:"readinessProbe"`
	SecurityContext *securityContext `yaml:"securityContext"`
	Resources       struct {
		Requests map[string]any `yaml:"requests"`
		Limits   map[string]any `yaml:"limits"`
	} `yaml:"resources"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

// workloadKinds are the kinds whose spec.template is a pod template.
var workloadKinds = map[string]bool{"Deployment": true, "StatefulSet": true, "DaemonSet": true, "Job": true}

// loadManifests parses every YAML document under deploy/.
func loadManifests(t *testing.T) []object {
	t.Helper()
	var objs []object
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		if filepath.Base(path) == "kustomization.yaml" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var node yaml.Node
			if err := dec.Decode(&node); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Errorf("%s: document %d: %v", path, i, err)
				break
			}
			var o object
			var raw map[string]any
			if err := node.Decode(&o); err != nil {
				t.Errorf("%s: document %d: %v", path, i, err)
				continue
			}
			if err := node.Decode(&raw); err != nil || raw == nil {
				continue // an empty document
			}
			if o.Kind == "Service" {
				if spec, ok := raw["spec"].(map[string]any); ok {
					if sel, ok := spec["selector"].(map[string]any); ok {
						o.Spec.ServiceSelector = map[string]string{}
						for k, v := range sel {
							s, _ := v.(string)
							o.Spec.ServiceSelector[k] = s
						}
					}
				}
			}
			o.file, o.raw = path, raw
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: document %d lacks apiVersion, kind or metadata.name", path, i)
			}
			objs = append(objs, o)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) == 0 {
		t.Fatal("no manifests found under deploy/")
	}
	return objs
}

// isKvrouter reports whether a container runs the kvrouter image (the
// kustomization maps the image name "kvrouter" to the registry's).
func isKvrouter(c container) bool {
	img := c.Image
	if i := strings.LastIndex(img, "/"); i >= 0 {
		img = img[i+1:]
	}
	img, _, _ = strings.Cut(img, ":")
	img, _, _ = strings.Cut(img, "@")
	return img == "kvrouter"
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// environment returns the container's variables as Kubernetes would set
// them, with stand-ins for the values only the cluster knows (pod fields,
// secrets), and expands $(VAR) references in args the way the kubelet does.
func environment(c container) (env map[string]string, expand func(string) string) {
	env = map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "status.podIP":
				env[e.Name] = "10.1.2.3"
			default:
				env[e.Name] = "pod-abc12"
			}
		case e.ValueFrom.SecretKeyRef != nil:
			env[e.Name] = "secret" + strings.ReplaceAll(e.ValueFrom.SecretKeyRef.Key, "-", "")
		default:
			env[e.Name] = "x"
		}
	}
	expand = func(s string) string {
		return varRef.ReplaceAllStringFunc(s, func(m string) string {
			name := varRef.FindStringSubmatch(m)[1]
			if v, ok := env[name]; ok {
				return v
			}
			return m // the kubelet leaves unknown references as they are
		})
	}
	return env, expand
}

// kvrouterEnviron is env's KVROUTER_* variables as KEY=value strings.
func kvrouterEnviron(env map[string]string) []string {
	var out []string
	for k, v := range env {
		if strings.HasPrefix(k, "KVROUTER_") {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

// podContainers lists a workload's containers with the object they are in.
type podContainer struct {
	obj *object
	c   container
}

func containersOf(objs []object) []podContainer {
	var out []podContainer
	for i := range objs {
		o := &objs[i]
		if !workloadKinds[o.Kind] {
			continue
		}
		for _, c := range append(append([]container{}, o.Spec.Template.Spec.InitContainers...), o.Spec.Template.Spec.Containers...) {
			out = append(out, podContainer{obj: o, c: c})
		}
	}
	return out
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources          []string `yaml:"resources"`
		ConfigMapGenerator []struct {
			Files []string `yaml:"files"`
		} `yaml:"configMapGenerator"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		listed[r] = true
	}
	for _, g := range k.ConfigMapGenerator {
		for _, f := range g.Files {
			if _, err := os.Stat(filepath.Join(repoRoot, "deploy", f)); err != nil {
				t.Errorf("kustomization.yaml generates from %s: %v", f, err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "deploy", "*.yaml"))
	found := 0
	for _, f := range files {
		base := filepath.Base(f)
		if base == "kustomization.yaml" {
			continue
		}
		found++
		if !listed[base] {
			t.Errorf("deploy/%s is not in kustomization.yaml resources", base)
		}
		delete(listed, base)
	}
	for r := range listed {
		t.Errorf("kustomization.yaml lists %s, which does not exist", r)
	}
	if found == 0 {
		t.Fatal("no manifests next to kustomization.yaml")
	}
}

func TestWorkloadsAreLockedDown(t *testing.T) {
	objs := loadManifests(t)
	n := 0
	for _, pc := range containersOf(objs) {
		o, c := pc.obj, pc.c
		where := o.file + ": " + o.Kind + "/" + o.Metadata.Name + " container " + c.Name
		if len(c.Resources.Requests) == 0 {
			t.Errorf("%s: no resource requests", where)
		}
		if _, ok := c.Resources.Limits["memory"]; !ok {
			t.Errorf("%s: no memory limit", where)
		}
		if c.LivenessProbe == nil && !isKvrouter(c) {
			// Sidecars without a port (the agent) are exempt; servers are not.
			if len(c.Ports) > 0 {
				t.Errorf("%s: serves ports but has no liveness probe", where)
			}
		}
		sc := merged(o.Spec.Template.Spec.SecurityContext, c.SecurityContext)
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation must be false", where)
		}
		if !isKvrouter(c) {
			continue
		}
		n++
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("%s: kvrouter must run as a non-root user (runAsNonRoot and a non-zero runAsUser)", where)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: kvrouter must run on a read-only root file system", where)
		}
	}
	if n == 0 {
		t.Fatal("no container runs the kvrouter image")
	}
}

// merged applies a container's security context over the pod's (the
// fields both have).
func merged(pod, c *securityContext) securityContext {
	var out securityContext
	if pod != nil {
		out = *pod
	}
	if c != nil {
		if c.RunAsNonRoot != nil {
			out.RunAsNonRoot = c.RunAsNonRoot
		}
		if c.RunAsUser != nil {
			out.RunAsUser = c.RunAsUser
		}
		out.ReadOnlyRootFilesystem = c.ReadOnlyRootFilesystem
		out.AllowPrivilegeEscalation = c.AllowPrivilegeEscalation
	}
	return out
}

func TestServicesSelectPodsAndPorts(t *testing.T) {
	objs := loadManifests(t)
	for _, s := range objs {
		if s.Kind != "Service" {
			continue
		}
		if len(s.Spec.ServiceSelector) == 0 {
			t.Errorf("%s: Service/%s has no selector", s.file, s.Metadata.Name)
			continue
		}
		var pods []*object
		for i := range objs {
			w := &objs[i]
			if workloadKinds[w.Kind] && subset(s.Spec.ServiceSelector, w.Spec.Template.Metadata.Labels) {
				pods = append(pods, w)
			}
		}
		if len(pods) == 0 {
			t.Errorf("%s: Service/%s selects no pod template", s.file, s.Metadata.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			for _, w := range pods {
				if !hasPort(w.Spec.Template.Spec, p.TargetPort, p.Port) {
					t.Errorf("%s: Service/%s port %s: %s/%s has no container port %v", s.file, s.Metadata.Name, p.Name, w.Kind, w.Metadata.Name, p.TargetPort)
				}
			}
		}
	}
	// Every workload's selector must match its own template.
	for _, w := range objs {
		if workloadKinds[w.Kind] && !subset(w.Spec.Selector.MatchLabels, w.Spec.Template.Metadata.Labels) || workloadKinds[w.Kind] && len(w.Spec.Selector.MatchLabels) == 0 {
			t.Errorf("%s: %s/%s selector does not match its pod template", w.file, w.Kind, w.Metadata.Name)
		}
	}
}

func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// hasPort reports whether the pod exposes target (a port name or number;
// nil means the Service port number).
func hasPort(p podSpec, target any, port int) bool {
	for _, c := range p.Containers {
		for _, cp := range c.Ports {
			switch v := target.(type) {
			case nil:
				if cp.ContainerPort == port {
					return true
				}
			case string:
				if cp.Name == v {
					return true
				}
			case int:
				if cp.ContainerPort == v {
					return true
				}
			}
		}
	}
	return false
}
