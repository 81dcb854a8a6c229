"""The S3 API table of docs/s3.md, driven with boto3 against an Osprey
gateway, as TestBoto3 runs it: python3 boto3_api.py (the endpoint and keys
in OSPREY_S3_ENDPOINT, OSPREY_S3_ACCESS_KEY, OSPREY_S3_SECRET_KEY).

Every step asserts what S3 answers; the first that does not hold raises,
and the script exits non-zero with the traceback. It prints "ok" last.
"""

import hashlib
import os
import sys
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["OSPREY_S3_ENDPOINT"]


def new_client(**config):
    """A client of the gateway, path-style, SigV4, no retries; config adds
    to botocore's Config."""
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=os.environ["OSPREY_S3_ACCESS_KEY"],
        aws_secret_access_key=os.environ["OSPREY_S3_SECRET_KEY"],
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      retries={"max_attempts": 1}, **config),
    )


s3 = new_client()
B = "boto-bucket"


def md5(b):
    return hashlib.md5(b).hexdigest()


def error_of(f, **kw):
    """The S3 error code and HTTP status f(**kw) fails with."""
    try:
        f(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    raise AssertionError("%s(%s) succeeded" % (f.__name__, kw))


def step(name):
    print("==", name, flush=True)


def payload(n, seed):
    return bytes((i * 31 + seed) % 251 for i in range(n))


step("buckets")
assert error_of(s3.head_bucket, Bucket=B)[1] == 404
s3.create_bucket(Bucket=B)
assert error_of(s3.create_bucket, Bucket=B) == ("BucketAlreadyOwnedByYou", 409)
assert B in [b["Name"] for b in s3.list_buckets()["Buckets"]]
s3.head_bucket(Bucket=B)
assert s3.get_bucket_location(Bucket=B).get("LocationConstraint") in (None, "")

step("put, get, head, metadata, ranges")
data = payload(300 << 10, 1)
r = s3.put_object(Bucket=B, Key="dir/a.bin", Body=data, ContentType="application/x-boto",
                  Metadata={"color": "green"}, CacheControl="max-age=5")
assert r["ETag"] == '"%s"' % md5(data), r["ETag"]
g = s3.get_object(Bucket=B, Key="dir/a.bin")
assert g["Body"].read() == data
assert g["ContentType"] == "application/x-boto" and g["Metadata"] == {"color": "green"}
assert g["CacheControl"] == "max-age=5"
h = s3.head_object(Bucket=B, Key="dir/a.bin")
assert h["ContentLength"] == len(data) and h["ETag"] == r["ETag"]
g = s3.get_object(Bucket=B, Key="dir/a.bin", Range="bytes=100-199")
assert g["Body"].read() == data[100:200] and g["ContentRange"] == "bytes 100-199/%d" % len(data)
assert s3.get_object(Bucket=B, Key="dir/a.bin", Range="bytes=-10")["Body"].read() == data[-10:]
assert error_of(s3.get_object, Bucket=B, Key="dir/a.bin", Range="bytes=%d-" % len(data)) == ("InvalidRange", 416)
assert error_of(s3.get_object, Bucket=B, Key="nope") == ("NoSuchKey", 404)
assert error_of(s3.get_object, Bucket="no-such-bucket", Key="k") == ("NoSuchBucket", 404)

step("empty PUTs keep the connection sound")
# botocore sends Expect: 100-continue on empty PUTs too; answered without a
# 100 it misread the connection's next response before 1.43.77
# (boto/botocore#3755): the next request stalled its read timeout and was
# sent again, so the conditional PUT below failed PreconditionFailed after
# it had been stored. One connection, a short timeout, no retries.
quick = new_client(read_timeout=5, max_pool_connections=1)
for i in range(3):
    r = quick.put_object(Bucket=B, Key="empty-%d" % i, Body=b"")
    assert r["ETag"] == '"%s"' % md5(b""), r["ETag"]
    quick.put_object(Bucket=B, Key="after-empty-%d" % i, Body=b"abc", IfNoneMatch="*")
    assert quick.get_object(Bucket=B, Key="after-empty-%d" % i)["Body"].read() == b"abc"
for i in range(3):
    quick.delete_objects(Bucket=B, Delete={"Objects": [{"Key": "empty-%d" % i}, {"Key": "after-empty-%d" % i}]})

step("checksums")
# CRC32C needs botocore[crt]; SHA-256 does not.
r = s3.put_object(Bucket=B, Key="crc", Body=b"checked", ChecksumAlgorithm="SHA256")
assert r.get("ChecksumSHA256"), r
assert error_of(s3.put_object, Bucket=B, Key="crc", Body=b"x", ContentMD5="1B2M2Y8AsgTpgAmY7PhCfg==") == ("BadDigest", 400)

step("conditional requests")
etag = s3.head_object(Bucket=B, Key="dir/a.bin")["ETag"]
assert s3.get_object(Bucket=B, Key="dir/a.bin", IfMatch=etag)["Body"].read() == data
assert error_of(s3.get_object, Bucket=B, Key="dir/a.bin", IfMatch='"nope"') == ("PreconditionFailed", 412)
assert error_of(s3.get_object, Bucket=B, Key="dir/a.bin", IfNoneMatch=etag)[1] == 304
s3.put_object(Bucket=B, Key="cond-del", Body=b"delete me if")
assert error_of(s3.delete_object, Bucket=B, Key="cond-del", IfMatch='"%s"' % md5(b"other")) == ("PreconditionFailed", 412)
s3.delete_object(Bucket=B, Key="cond-del", IfMatch='"%s"' % md5(b"delete me if"))
assert error_of(s3.delete_object, Bucket=B, Key="cond-del", IfMatch="*") == ("NoSuchKey", 404)

step("listings")
for i in range(5):
    s3.put_object(Bucket=B, Key="list/%d" % i, Body=b"x")
s3.put_object(Bucket=B, Key="list/sub/deep", Body=b"y")
v2 = s3.list_objects_v2(Bucket=B, Prefix="list/", Delimiter="/", MaxKeys=3)
assert [o["Key"] for o in v2["Contents"]] == ["list/0", "list/1", "list/2"] and v2["IsTruncated"]
v2 = s3.list_objects_v2(Bucket=B, Prefix="list/", Delimiter="/", ContinuationToken=v2["NextContinuationToken"])
assert [o["Key"] for o in v2["Contents"]] == ["list/3", "list/4"]
assert [p["Prefix"] for p in v2["CommonPrefixes"]] == ["list/sub/"]
v1 = s3.list_objects(Bucket=B, Prefix="list/", Marker="list/3")
assert [o["Key"] for o in v1["Contents"]] == ["list/4", "list/sub/deep"]
keys = [k for page in s3.get_paginator("list_objects_v2").paginate(Bucket=B, PaginationConfig={"PageSize": 2})
        for k in [o["Key"] for o in page.get("Contents", [])]]
assert keys == sorted(keys) and "list/sub/deep" in keys and "dir/a.bin" in keys

step("copy")
c = s3.copy_object(Bucket=B, Key="copy.bin", CopySource={"Bucket": B, "Key": "dir/a.bin"})
assert c["CopyObjectResult"]["ETag"] == '"%s"' % md5(data)
assert s3.get_object(Bucket=B, Key="copy.bin")["Metadata"] == {"color": "green"}

step("multipart, UploadPartCopy, partNumber")
up = s3.create_multipart_upload(Bucket=B, Key="mp.bin", ContentType="text/x-mp")
uid = up["UploadId"]
p1 = payload(5 << 20, 2)
e1 = s3.upload_part(Bucket=B, Key="mp.bin", UploadId=uid, PartNumber=1, Body=p1)["ETag"]
assert e1 == '"%s"' % md5(p1)
e2 = s3.upload_part_copy(Bucket=B, Key="mp.bin", UploadId=uid, PartNumber=2,
                         CopySource={"Bucket": B, "Key": "dir/a.bin"},
                         CopySourceRange="bytes=0-1023")["CopyPartResult"]["ETag"]
assert e2 == '"%s"' % md5(data[:1024])
assert [p["PartNumber"] for p in s3.list_parts(Bucket=B, Key="mp.bin", UploadId=uid)["Parts"]] == [1, 2]
assert uid in [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=B)["Uploads"]]
done = s3.complete_multipart_upload(Bucket=B, Key="mp.bin", UploadId=uid, MultipartUpload={
    "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
assert done["ETag"].endswith('-2"'), done["ETag"]
assert s3.get_object(Bucket=B, Key="mp.bin")["Body"].read() == p1 + data[:1024]
g = s3.get_object(Bucket=B, Key="mp.bin", PartNumber=2)
assert g["Body"].read() == data[:1024] and g["PartsCount"] == 2
other = s3.create_multipart_upload(Bucket=B, Key="aborted")["UploadId"]
s3.abort_multipart_upload(Bucket=B, Key="aborted", UploadId=other)
assert error_of(s3.list_parts, Bucket=B, Key="aborted", UploadId=other) == ("NoSuchUpload", 404)
# In a bucket that is not there, every upload operation says so.
for f, kw in [(s3.list_parts, {}), (s3.abort_multipart_upload, {}),
              (s3.upload_part, {"PartNumber": 1, "Body": b""}),
              (s3.complete_multipart_upload, {"MultipartUpload": {"Parts": [{"PartNumber": 1, "ETag": e1}]}})]:
    assert error_of(f, Bucket="no-such-bucket", Key="k", UploadId=other, **kw) == ("NoSuchBucket", 404), f.__name__

step("presigned URLs")
url = s3.generate_presigned_url("get_object", Params={"Bucket": B, "Key": "dir/a.bin"}, ExpiresIn=60)
with urllib.request.urlopen(url) as resp:
    assert resp.read() == data
url = s3.generate_presigned_url("put_object", Params={"Bucket": B, "Key": "presigned"}, ExpiresIn=60)
req = urllib.request.Request(url, data=b"by url", method="PUT")
with urllib.request.urlopen(req) as resp:
    assert resp.status == 200
assert s3.get_object(Bucket=B, Key="presigned")["Body"].read() == b"by url"
bad = url.replace("presigned?", "other?")
try:
    urllib.request.urlopen(urllib.request.Request(bad, data=b"x", method="PUT"))
    raise AssertionError("a presigned URL for another key was accepted")
except urllib.error.HTTPError as e:
    assert e.code == 403 and b"SignatureDoesNotMatch" in e.read()

step("a Date header, and aws-chunked in Content-Encoding")
# With a Date header, botocore signs with it (formatdate's "-0000" zone)
# and sends no X-Amz-Date (test_object_create_date_and_amz_date).
dated = new_client()
dated.meta.events.register("before-call.s3.PutObject",
                           lambda params, **kw: params["headers"].update({"Date": "now"}))
dated.put_object(Bucket=B, Key="dated", Body=b"x")
assert s3.get_object(Bucket=B, Key="dated")["Body"].read() == b"x"
# aws-chunked names how a body was sent; S3 does not store it
# (test_object_content_encoding_aws_chunked).
for sent, kept in [("gzip, aws-chunked", "gzip"), ("aws-chunked, deflate, gzip", "deflate, gzip"),
                   ("aws-chunked", None)]:
    s3.put_object(Bucket=B, Key="encoded", Body=b"y", ContentEncoding=sent)
    assert s3.head_object(Bucket=B, Key="encoded").get("ContentEncoding") == kept, sent

step("deletes")
s3.delete_object(Bucket=B, Key="presigned")
keys = [o["Key"] for o in s3.list_objects_v2(Bucket=B)["Contents"]]
d = s3.delete_objects(Bucket=B, Delete={"Objects": [{"Key": k} for k in keys]})
assert sorted(x["Key"] for x in d["Deleted"]) == sorted(keys) and not d.get("Errors")
assert s3.list_objects_v2(Bucket=B)["KeyCount"] == 0
# The clean-up idiom of versioned and unversioned buckets alike: every
# version (here each object's one, null) deleted through the resource API.
s3.put_object(Bucket=B, Key="v/1", Body=b"1")
s3.put_object(Bucket=B, Key="v/2", Body=b"2")
versions = s3.list_object_versions(Bucket=B)["Versions"]
assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in versions] == [("v/1", "null", True), ("v/2", "null", True)], versions
boto3.resource("s3", endpoint_url=ENDPOINT, aws_access_key_id=os.environ["OSPREY_S3_ACCESS_KEY"],
               aws_secret_access_key=os.environ["OSPREY_S3_SECRET_KEY"], region_name="us-east-1",
               config=Config(signature_version="s3v4", s3={"addressing_style": "path"})).Bucket(B).object_versions.delete()
assert s3.list_objects_v2(Bucket=B)["KeyCount"] == 0
s3.delete_bucket(Bucket=B)
assert error_of(s3.delete_bucket, Bucket=B) == ("NoSuchBucket", 404)

print("ok boto3", getattr(boto3, "__version__", "?"))
sys.exit(0)
