package kubecapture

// captureNS is the namespace of the namespaced objects created for the
// Table captures.
const captureNS = "capture"

// tableObject is an object created through kube-apiserver whose Table
// (kube-apiserver's printer for its kind) is captured, with the value
// kube-apiserver stored for it.
type tableObject struct {
	// path is the collection path at the version kube-apiserver serves,
	// e.g. "/api/v1/namespaces/capture/configmaps".
	path string
	// body is the object's JSON; "" means an object kube-apiserver
	// creates itself (name is then the object's name).
	body string
	name string
	// status, when set, is PUT to the status subresource after creation.
	status string
}

const podSpec = `{"containers":[{"name":"web","image":"nginx:1.27","ports":[{"containerPort":80}]},{"name":"side","image":"busybox"}]}`

// tableObjects are created in this order (webhooks and admission policies
// last: they match no request, but they are admission configuration).
// Their spellings are kube-apiserver v1.37's: each must pass validation.
var tableObjects = []tableObject{
	{path: "/api/v1/namespaces", name: captureNS, body: `{"metadata":{"name":"capture","labels":{"team":"a"}}}`},
	{path: "/api/v1/namespaces/capture/serviceaccounts", name: "default", body: `{"metadata":{"name":"default"}}`},
	{path: "/api/v1/namespaces/capture/serviceaccounts", name: "builder", body: `{"metadata":{"name":"builder"},"secrets":[{"name":"builder-token"},{"name":"other"}]}`},
	{path: "/api/v1/namespaces/capture/configmaps", name: "cm", body: `{"metadata":{"name":"cm"},"data":{"a":"1","b":"2"},"binaryData":{"c":"AAE="}}`},
	{path: "/api/v1/namespaces/capture/secrets", name: "secret", body: `{"metadata":{"name":"secret"},"type":"Opaque","data":{"a":"YQ=="}}`},
	{path: "/api/v1/namespaces/capture/services", name: "web", body: `{"metadata":{"name":"web"},"spec":{"selector":{"app":"web"},"ports":[{"name":"http","port":80,"targetPort":8080},{"name":"dns","port":53,"protocol":"UDP"}],"externalIPs":["192.0.2.10"]}}`},
	{path: "/api/v1/namespaces/capture/services", name: "ext", body: `{"metadata":{"name":"ext"},"spec":{"type":"ExternalName","externalName":"example.com"}}`},
	{path: "/api/v1/namespaces/capture/endpoints", name: "web", body: `{"metadata":{"name":"web"},"subsets":[{"addresses":[{"ip":"10.1.0.1"},{"ip":"10.1.0.2"}],"ports":[{"name":"http","port":8080}]}]}`},
	{path: "/api/v1/namespaces/capture/replicationcontrollers", name: "rc", body: `{"metadata":{"name":"rc"},"spec":{"replicas":2,"selector":{"app":"rc"},"template":{"metadata":{"labels":{"app":"rc"}},"spec":` + podSpec + `}}}`},
	{path: "/api/v1/namespaces/capture/pods", name: "pod", body: `{"metadata":{"name":"pod","labels":{"app":"web"}},"spec":` + podSpec + `}`,
		status: `{"status":{"phase":"Running","podIP":"10.1.0.1","podIPs":[{"ip":"10.1.0.1"}],"conditions":[{"type":"Ready","status":"True"}],"containerStatuses":[{"name":"web","image":"nginx:1.27","imageID":"","ready":true,"restartCount":2,"started":true,"state":{"running":{"startedAt":"2026-01-02T03:04:05Z"}},"lastState":{"terminated":{"exitCode":1,"reason":"Error","startedAt":"2026-01-02T03:00:00Z","finishedAt":"2026-01-02T03:04:00Z"}}},{"name":"side","image":"busybox","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"CrashLoopBackOff"}}}]}}`},
	{path: "/api/v1/namespaces/capture/podtemplates", name: "tmpl", body: `{"metadata":{"name":"tmpl"},"template":{"metadata":{"labels":{"app":"t"}},"spec":` + podSpec + `}}`},
	{path: "/api/v1/namespaces/capture/resourcequotas", name: "quota", body: `{"metadata":{"name":"quota"},"spec":{"hard":{"pods":"10","requests.cpu":"4","limits.memory":"8Gi"}}}`,
		status: `{"status":{"hard":{"pods":"10","requests.cpu":"4","limits.memory":"8Gi"},"used":{"pods":"3","requests.cpu":"1500m","limits.memory":"1Gi"}}}`},
	{path: "/api/v1/namespaces/capture/limitranges", name: "limits", body: `{"metadata":{"name":"limits"},"spec":{"limits":[{"type":"Container","default":{"cpu":"200m"},"defaultRequest":{"cpu":"100m"},"max":{"memory":"1Gi"}}]}}`},
	{path: "/api/v1/persistentvolumes", name: "pv", body: `{"metadata":{"name":"pv"},"spec":{"capacity":{"storage":"5Gi"},"accessModes":["ReadWriteOnce","ReadOnlyMany"],"persistentVolumeReclaimPolicy":"Retain","storageClassName":"fast","volumeMode":"Filesystem","hostPath":{"path":"/data"},"claimRef":{"namespace":"capture","name":"claim"}}}`,
		status: `{"status":{"phase":"Bound"}}`},
	{path: "/api/v1/namespaces/capture/persistentvolumeclaims", name: "claim", body: `{"metadata":{"name":"claim"},"spec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"5Gi"}},"storageClassName":"fast","volumeName":"pv","volumeMode":"Filesystem"}}`,
		status: `{"status":{"phase":"Bound","accessModes":["ReadWriteOnce"],"capacity":{"storage":"5Gi"}}}`},
	{path: "/api/v1/nodes", name: "node-1", body: `{"metadata":{"name":"node-1","labels":{"node-role.kubernetes.io/control-plane":""}},"spec":{"podCIDR":"10.1.0.0/24"}}`,
		status: `{"status":{"conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-01-02T03:04:05Z","lastTransitionTime":"2026-01-02T03:04:05Z"}],"addresses":[{"type":"InternalIP","address":"192.0.2.1"}],"nodeInfo":{"kubeletVersion":"v1.37.2","osImage":"Debian","kernelVersion":"6.1","containerRuntimeVersion":"containerd://2.0","machineID":"","systemUUID":"","bootID":"","kubeProxyVersion":"","operatingSystem":"linux","architecture":"amd64"}}}`},
	{path: "/api/v1/namespaces/capture/events", name: "ev", body: `{"metadata":{"name":"ev"},"involvedObject":{"kind":"Pod","namespace":"capture","name":"pod","apiVersion":"v1"},"reason":"Started","message":"Started container web","type":"Normal","count":3,"firstTimestamp":"2026-01-02T03:04:05Z","lastTimestamp":"2026-01-02T03:05:05Z","source":{"component":"kubelet","host":"node-1"}}`},

	{path: "/apis/apps/v1/namespaces/capture/deployments", name: "web", body: `{"metadata":{"name":"web"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},"spec":` + podSpec + `}}}`},
	{path: "/apis/apps/v1/namespaces/capture/replicasets", name: "web-1", body: `{"metadata":{"name":"web-1"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web","h":"1"}},"template":{"metadata":{"labels":{"app":"web","h":"1"}},"spec":` + podSpec + `}}}`},
	{path: "/apis/apps/v1/namespaces/capture/daemonsets", name: "agent", body: `{"metadata":{"name":"agent"},"spec":{"selector":{"matchLabels":{"app":"agent"}},"template":{"metadata":{"labels":{"app":"agent"}},"spec":{"nodeSelector":{"kubernetes.io/os":"linux"},"containers":[{"name":"a","image":"agent"}]}}}}`},
	{path: "/apis/apps/v1/namespaces/capture/statefulsets", name: "db", body: `{"metadata":{"name":"db"},"spec":{"serviceName":"db","replicas":2,"selector":{"matchLabels":{"app":"db"}},"template":{"metadata":{"labels":{"app":"db"}},"spec":` + podSpec + `}}}`},
	{path: "/apis/apps/v1/namespaces/capture/controllerrevisions", name: "db-1", body: `{"metadata":{"name":"db-1","ownerReferences":[{"apiVersion":"apps/v1","kind":"StatefulSet","name":"db","uid":"00000000-0000-0000-0000-000000000001","controller":true}]},"data":{"spec":{}},"revision":4}`},
	{path: "/apis/autoscaling/v2/namespaces/capture/horizontalpodautoscalers", name: "web", body: `{"metadata":{"name":"web"},"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"web"},"minReplicas":2,"maxReplicas":10,"metrics":[{"type":"Resource","resource":{"name":"cpu","target":{"type":"Utilization","averageUtilization":80}}},{"type":"Resource","resource":{"name":"memory","target":{"type":"AverageValue","averageValue":"500Mi"}}}]}}`,
		status: `{"status":{"currentReplicas":3,"desiredReplicas":3,"currentMetrics":[{"type":"Resource","resource":{"name":"cpu","current":{"averageUtilization":42,"averageValue":"100m"}}}]}}`},
	{path: "/apis/batch/v1/namespaces/capture/jobs", name: "job", body: `{"metadata":{"name":"job"},"spec":{"completions":3,"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"j","image":"busybox"}]}}}}`},
	{path: "/apis/batch/v1/namespaces/capture/cronjobs", name: "nightly", body: `{"metadata":{"name":"nightly"},"spec":{"schedule":"0 3 * * *","timeZone":"Etc/UTC","jobTemplate":{"spec":{"template":{"spec":{"restartPolicy":"OnFailure","containers":[{"name":"j","image":"busybox"}]}}}}}}`},
	{path: "/apis/coordination.k8s.io/v1/namespaces/capture/leases", name: "lock", body: `{"metadata":{"name":"lock"},"spec":{"holderIdentity":"node-1_abc","leaseDurationSeconds":15}}`},
	{path: "/apis/discovery.k8s.io/v1/namespaces/capture/endpointslices", name: "web-abc", body: `{"metadata":{"name":"web-abc","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","endpoints":[{"addresses":["10.1.0.1"]},{"addresses":["10.1.0.2"]}],"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}`},
	{path: "/apis/networking.k8s.io/v1/ingressclasses", name: "nginx", body: `{"metadata":{"name":"nginx"},"spec":{"controller":"k8s.io/ingress-nginx","parameters":{"apiGroup":"k8s.example.com","kind":"IngressParameters","name":"external-lb"}}}`},
	{path: "/apis/networking.k8s.io/v1/namespaces/capture/ingresses", name: "web", body: `{"metadata":{"name":"web"},"spec":{"ingressClassName":"nginx","tls":[{"hosts":["a.example.com"],"secretName":"tls"}],"rules":[{"host":"a.example.com","http":{"paths":[{"path":"/","pathType":"Prefix","backend":{"service":{"name":"web","port":{"number":80}}}}]}}]}}`},
	{path: "/apis/networking.k8s.io/v1/namespaces/capture/networkpolicies", name: "deny", body: `{"metadata":{"name":"deny"},"spec":{"podSelector":{"matchLabels":{"app":"web"}},"policyTypes":["Ingress"]}}`},
	{path: "/apis/networking.k8s.io/v1/servicecidrs", name: "extra", body: `{"metadata":{"name":"extra"},"spec":{"cidrs":["10.2.0.0/24"]}}`},
	{path: "/apis/networking.k8s.io/v1/ipaddresses", name: "10.2.0.10", body: `{"metadata":{"name":"10.2.0.10"},"spec":{"parentRef":{"group":"","resource":"services","namespace":"capture","name":"web"}}}`},
	{path: "/apis/node.k8s.io/v1/runtimeclasses", name: "gvisor", body: `{"metadata":{"name":"gvisor"},"handler":"runsc"}`},
	{path: "/apis/policy/v1/namespaces/capture/poddisruptionbudgets", name: "web", body: `{"metadata":{"name":"web"},"spec":{"minAvailable":2,"selector":{"matchLabels":{"app":"web"}}}}`},
	{path: "/apis/rbac.authorization.k8s.io/v1/namespaces/capture/roles", name: "reader", body: `{"metadata":{"name":"reader"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get","list"]}]}`},
	{path: "/apis/rbac.authorization.k8s.io/v1/clusterroles", name: "reader", body: `{"metadata":{"name":"reader"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`},
	{path: "/apis/rbac.authorization.k8s.io/v1/namespaces/capture/rolebindings", name: "reader", body: `{"metadata":{"name":"reader"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"reader"},"subjects":[{"kind":"User","name":"alice","apiGroup":"rbac.authorization.k8s.io"},{"kind":"ServiceAccount","name":"builder","namespace":"capture"}]}`},
	{path: "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", name: "reader", body: `{"metadata":{"name":"reader"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"reader"},"subjects":[{"kind":"Group","name":"devs","apiGroup":"rbac.authorization.k8s.io"}]}`},
	{path: "/apis/scheduling.k8s.io/v1/priorityclasses", name: "high", body: `{"metadata":{"name":"high"},"value":1000000,"globalDefault":false,"description":"high","preemptionPolicy":"Never"}`},
	{path: "/apis/storage.k8s.io/v1/storageclasses", name: "fast", body: `{"metadata":{"name":"fast","annotations":{"storageclass.kubernetes.io/is-default-class":"true"}},"provisioner":"example.com/fast","reclaimPolicy":"Retain","volumeBindingMode":"WaitForFirstConsumer","allowVolumeExpansion":true}`},
	{path: "/apis/storage.k8s.io/v1/csidrivers", name: "csi.example.com", body: `{"metadata":{"name":"csi.example.com"},"spec":{"attachRequired":true,"podInfoOnMount":true,"volumeLifecycleModes":["Persistent","Ephemeral"],"fsGroupPolicy":"File","storageCapacity":true,"requiresRepublish":false,"tokenRequests":[{"audience":"csi"}]}}`},
	{path: "/apis/storage.k8s.io/v1/csinodes", name: "node-1", body: `{"metadata":{"name":"node-1"},"spec":{"drivers":[{"name":"csi.example.com","nodeID":"node-1"}]}}`},
	{path: "/apis/storage.k8s.io/v1/namespaces/capture/csistoragecapacities", name: "cap", body: `{"metadata":{"name":"cap"},"storageClassName":"fast","capacity":"10Gi"}`},
	{path: "/apis/storage.k8s.io/v1/volumeattachments", name: "va", body: `{"metadata":{"name":"va"},"spec":{"attacher":"csi.example.com","nodeName":"node-1","source":{"persistentVolumeName":"pv"}}}`,
		status: `{"status":{"attached":true}}`},
	{path: "/apis/storage.k8s.io/v1/volumeattributesclasses", name: "gold", body: `{"metadata":{"name":"gold"},"driverName":"csi.example.com","parameters":{"iops":"1000"}}`},
	{path: "/apis/certificates.k8s.io/v1/certificatesigningrequests", name: "csr", body: "CSR"},
	{path: "/apis/certificates.k8s.io/v1/clustertrustbundles", name: "bundle", body: "CTB"},
	{path: "/apis/resource.k8s.io/v1/deviceclasses", name: "gpu", body: `{"metadata":{"name":"gpu"},"spec":{"selectors":[{"cel":{"expression":"device.driver == \"gpu.example.com\""}}]}}`},
	{path: "/apis/resource.k8s.io/v1/namespaces/capture/resourceclaims", name: "claim", body: `{"metadata":{"name":"claim"},"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu"}}]}}}`},
	{path: "/apis/resource.k8s.io/v1/namespaces/capture/resourceclaimtemplates", name: "tmpl", body: `{"metadata":{"name":"tmpl"},"spec":{"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu"}}]}}}}`},
	{path: "/apis/resource.k8s.io/v1/resourceslices", name: "node-1-gpu", body: `{"metadata":{"name":"node-1-gpu"},"spec":{"driver":"gpu.example.com","nodeName":"node-1","pool":{"name":"node-1","generation":1,"resourceSliceCount":1},"devices":[{"name":"gpu-0"}]}}`},
	{path: "/apis/resource.k8s.io/v1/devicetaintrules", name: "maint", body: `{"metadata":{"name":"maint"},"spec":{"taint":{"key":"example.com/maintenance","value":"true","effect":"NoSchedule"}}}`},
	{path: "/apis/storagemigration.k8s.io/v1/storageversionmigrations", name: "secrets", body: `{"metadata":{"name":"secrets"},"spec":{"resource":{"group":"","resource":"secrets"}}}`},
	{path: "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", name: "exempt"},
	{path: "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", name: "global-default"},
	{path: "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", name: "exempt"},
	{path: "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", name: "global-default"},
	{path: "/apis/apiregistration.k8s.io/v1/apiservices", name: "v1.apps"},
	{path: "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", name: "widgets.example.com"},
	{path: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", name: "vap", body: `{"metadata":{"name":"vap"},"spec":{"failurePolicy":"Ignore","matchConstraints":{"resourceRules":[{"apiGroups":["example.invalid"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["nothings"]}]},"validations":[{"expression":"true"}]}}`},
	{path: "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", name: "vapb", body: `{"metadata":{"name":"vapb"},"spec":{"policyName":"vap","validationActions":["Warn"]}}`},
	{path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", name: "map", body: `{"metadata":{"name":"map"},"spec":{"failurePolicy":"Ignore","reinvocationPolicy":"Never","matchConstraints":{"resourceRules":[{"apiGroups":["example.invalid"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["nothings"]}]},"mutations":[{"patchType":"ApplyConfiguration","applyConfiguration":{"expression":"Object{}"}}]}}`},
	{path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings", name: "mapb", body: `{"metadata":{"name":"mapb"},"spec":{"policyName":"map"}}`},
	{path: "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", name: "vwh", body: `{"metadata":{"name":"vwh"},"webhooks":[{"name":"a.example.com","clientConfig":{"url":"https://127.0.0.1:1/a"},"rules":[{"apiGroups":["example.invalid"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["nothings"]}],"failurePolicy":"Ignore","sideEffects":"None","admissionReviewVersions":["v1"]},{"name":"b.example.com","clientConfig":{"url":"https://127.0.0.1:1/b"},"failurePolicy":"Ignore","sideEffects":"None","admissionReviewVersions":["v1"]}]}`},
	{path: "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", name: "mwh", body: `{"metadata":{"name":"mwh"},"webhooks":[{"name":"a.example.com","clientConfig":{"url":"https://127.0.0.1:1/a"},"rules":[{"apiGroups":["example.invalid"],"apiVersions":["v1"],"operations":["CREATE"],"resources":["nothings"]}],"failurePolicy":"Ignore","sideEffects":"None","admissionReviewVersions":["v1"]}]}`},
}
