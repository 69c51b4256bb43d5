"""Fills the test S3 server: `put.py ENDPOINT BUCKET < spec.json`, where
spec.json is {"files": [[KEY, LOCAL_PATH], ...], "deny": [KEY, ...]}. Makes
the bucket, uploads the files, and denies GetObject on the `deny` keys with
a bucket policy (moto enforces it: those keys answer 403)."""

import json
import sys

import boto3

endpoint, bucket = sys.argv[1], sys.argv[2]
spec = json.load(sys.stdin)
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id="test",
    aws_secret_access_key="test",
    region_name="us-east-1",
)
s3.create_bucket(Bucket=bucket)
for key, path in spec["files"]:
    with open(path, "rb") as f:
        s3.put_object(Bucket=bucket, Key=key, Body=f.read())
if spec.get("deny"):
    statements = [
        {
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{bucket}/{key}",
        }
        for key in spec["deny"]
    ]
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
