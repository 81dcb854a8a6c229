package ops

import (
	"strings"

	"github.com/ospreystore/osprey/proto/osdpb"
)

// Conditional writes: S3's If-Match and If-None-Match on PutObject, CopyObject
// and CompleteMultipartUpload. The client sends the condition, and the PG's
// primary checks it against the object the write would replace, on the PG's
// shard, so that no other write to the key comes between the check and the
// write (docs/osd.md, "Conditional writes").

const (
	// MaxConditionETags caps the ETags of one If-Match: a list longer than
	// any real client sends is refused rather than compared tag by tag.
	MaxConditionETags = 32
	// maxETagLen is longer than any ETag Osprey makes (32 hex digits, and
	// "-" and a part count for a multipart object).
	maxETagLen = 64
)

// ParseETagList splits the value of an If-Match or If-None-Match header:
// "*", or entity tags separated by commas, quoted or not, strong or weak
// (W/ is dropped: S3 compares the tag). The tags come back without quotes;
// "*" comes back as "*". An empty value, an empty entry, a tag with a quote
// or a control character inside, or more than MaxConditionETags tags is
// ErrInvalidArgument.
func ParseETagList(v string) ([]string, error) {
	var tags []string
	for tag := range strings.SplitSeq(v, ",") {
		tag = strings.TrimSpace(tag)
		if tag != "*" {
			tag = strings.TrimPrefix(tag, "W/")
			if len(tag) >= 2 && tag[0] == '"' && tag[len(tag)-1] == '"' {
				tag = tag[1 : len(tag)-1]
			}
		}
		if err := checkETag(tag); err != nil {
			return nil, err
		}
		if len(tags) == MaxConditionETags {
			return nil, Errorf(osdpb.Status_INVALID_ARGUMENT, "more than %d entity tags in %.40q", MaxConditionETags, v)
		}
		tags = append(tags, tag)
	}
	return tags, nil
}

// checkETag checks one tag of a condition, without its quotes.
func checkETag(tag string) error {
	if tag == "" || len(tag) > maxETagLen {
		return Errorf(osdpb.Status_INVALID_ARGUMENT, "entity tag %.80q: must be 1 to %d characters", tag, maxETagLen)
	}
	for i := 0; i < len(tag); i++ {
		if c := tag[i]; c == '"' || c < 0x21 || c > 0x7e {
			return Errorf(osdpb.Status_INVALID_ARGUMENT, "entity tag %q: character %q", tag, c)
		}
	}
	return nil
}

// CheckCondition checks a conditional write's condition as it arrives at
// an OSD: at least one of its parts set, and If-Match's tags as
// ParseETagList makes them.
func CheckCondition(c *osdpb.Condition) error {
	if len(c.GetIfMatch()) == 0 && !c.GetIfNoneMatchStar() {
		return Errorf(osdpb.Status_INVALID_ARGUMENT, "a conditional write without a condition")
	}
	if len(c.GetIfMatch()) > MaxConditionETags {
		return Errorf(osdpb.Status_INVALID_ARGUMENT, "%d entity tags in If-Match, at most %d", len(c.GetIfMatch()), MaxConditionETags)
	}
	for _, tag := range c.GetIfMatch() {
		if err := checkETag(tag); err != nil {
			return err
		}
	}
	return nil
}

// ConditionHolds evaluates c against cur, the object the write would
// replace (nil: the key holds none), in RFC 9110's order: If-Match (the
// object must exist, NoSuchKey if not, and have one of the ETags, else
// PreconditionFailed), then If-None-Match "*" (PreconditionFailed if the
// object exists).
func ConditionHolds(c *osdpb.Condition, cur *osdpb.ObjectMeta) error {
	if tags := c.GetIfMatch(); len(tags) > 0 {
		if cur == nil {
			return Errorf(osdpb.Status_NO_SUCH_KEY, "If-Match: the key holds no object")
		}
		match := false
		for _, tag := range tags {
			if tag == "*" || tag == cur.GetEtag() {
				match = true
				break
			}
		}
		// The messages name no ETag: a writer may not be a reader, and
		// an ETag (an MD5 of the body) would tell it about the bytes.
		if !match {
			return Errorf(osdpb.Status_PRECONDITION_FAILED, "If-Match: the object's ETag is none of those given")
		}
	}
	if c.GetIfNoneMatchStar() && cur != nil {
		return Errorf(osdpb.Status_PRECONDITION_FAILED, "If-None-Match: *: the key holds an object")
	}
	return nil
}
