#!/bin/sh
# How these fixtures were made (OpenSSL 3.0, 2026-11-29; valid for 100 years): a v3 root, a second
# root with the same name and another key, a v3 intermediate CA, and two version 1 leaves as
# `openssl x509 -req` issues them without extensions (leaf: CN=localhost under the root; deep:
# CN=*.example.com under the intermediate). Keys are PKCS#8 P-256. Unit tests of ../../v1_certs.rs.
set -e
openssl ecparam -name prime256v1 -genkey -noout -out root.key.pem
openssl req -new -x509 -key root.key.pem -out root.crt -days 36500 -subj "/C=QQ/O=Sluice test/CN=Sluice v1 test root"
openssl ecparam -name prime256v1 -genkey -noout -out other.key.pem
openssl req -new -x509 -key other.key.pem -out other.crt -days 36500 -subj "/C=QQ/O=Sluice test/CN=Sluice v1 test root"
openssl ecparam -name prime256v1 -genkey -noout -out inter.key.pem
openssl req -new -key inter.key.pem -out inter.csr -subj "/C=QQ/O=Sluice test/CN=Sluice v1 test intermediate"
printf 'basicConstraints=critical,CA:true\nkeyUsage=critical,keyCertSign,cRLSign\n' > ca.ext
openssl x509 -req -in inter.csr -CA root.crt -CAkey root.key.pem -CAcreateserial -out inter.crt -days 36500 -extfile ca.ext
for leaf in leaf:localhost deep:*.example.com; do
    name=${leaf%%:*}; cn=${leaf#*:}
    ca=root; [ "$name" = deep ] && ca=inter
    openssl ecparam -name prime256v1 -genkey -noout -out "$name.key.pem"
    openssl req -new -key "$name.key.pem" -out "$name.csr" -subj "/C=QQ/O=Sluice test/CN=$cn"
    openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key.pem" -CAcreateserial -out "$name.crt" -days 36500
    openssl pkcs8 -topk8 -nocrypt -in "$name.key.pem" -out "$name.key"
done
rm -f ./*.key.pem ./*.csr ./*.srl ca.ext
