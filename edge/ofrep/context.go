package ofrep

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/flagedge/flagedge/edge/decide"
	"github.com/flagedge/flagedge/shared/event"
	"github.com/flagedge/flagedge/shared/flags"
)

// The context's reserved attributes; every other top-level attribute is a person property.
// groups and groupProperties mirror /flags's groups and group_properties; geoipDisable its
// geoip_disable.
const (
	attrTargetingKey    = "targetingKey"
	attrGroups          = "groups"
	attrGroupProperties = "groupProperties"
	attrGeoIPDisable    = "geoipDisable"
)

func invalidContext(details string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: codeInvalidCtx, Details: details}
}

// parseRequest reads an evaluation request, {"context": {...}}, into what /flags evaluates:
// targetingKey is the distinct id, groups maps group types to keys, groupProperties maps
// group types to their properties, and every other attribute is a person property.
func parseRequest(body []byte) (*decide.Context, error) {
	var req struct {
		Context json.RawMessage `json:"context"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, parseError(err.Error())
	}
	var attrs map[string]any
	if len(req.Context) > 0 && string(req.Context) != "null" {
		if err := json.Unmarshal(req.Context, &attrs); err != nil {
			return nil, invalidContext("context must be a JSON object.")
		}
	}
	c := &decide.Context{PersonProperties: flags.Properties{}}
	for k, v := range attrs {
		switch k {
		case attrTargetingKey:
			switch id := v.(type) {
			case string:
				c.DistinctID = event.CleanString(id, event.MaxIDRunes)
			case float64:
				c.DistinctID = strconv.FormatFloat(id, 'f', -1, 64)
			default:
				return nil, invalidContext("targetingKey must be a string.")
			}
		case attrGroups:
			groups, ok := v.(map[string]any)
			if !ok {
				return nil, invalidContext("groups must map group types to group keys.")
			}
			c.Groups = make(map[string]string, len(groups))
			for name, key := range groups {
				switch key := key.(type) {
				case string:
					c.Groups[name] = event.CleanString(key, 0)
				case float64:
					c.Groups[name] = strconv.FormatFloat(key, 'f', -1, 64)
				default:
					return nil, invalidContext("the key of group " + strconv.Quote(name) + " must be a string.")
				}
			}
		case attrGroupProperties:
			groups, ok := v.(map[string]any)
			if !ok {
				return nil, invalidContext("groupProperties must map group types to objects of properties.")
			}
			c.GroupProperties = make(map[string]flags.Properties, len(groups))
			for name, props := range groups {
				m, ok := props.(map[string]any)
				if !ok {
					return nil, invalidContext("the properties of group " + strconv.Quote(name) + " must be an object.")
				}
				c.GroupProperties[name] = m
			}
		case attrGeoIPDisable:
			disable, ok := v.(bool)
			if !ok {
				return nil, invalidContext("geoipDisable must be true or false.")
			}
			c.GeoIPDisable = disable
		default:
			c.PersonProperties[k] = v
		}
	}
	if c.DistinctID == "" {
		return nil, &Error{Status: http.StatusBadRequest, Code: codeTargetingKey,
			Details: "The context has no targetingKey: flagedge evaluates flags for a distinct id."}
	}
	return c, nil
}
