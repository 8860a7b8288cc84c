#!/usr/bin/env bash
# Makes the certificates the TLS tests use, with the openssl tool, into DIR
# (made if missing).  Nothing here is secret or kept: every test run makes
# its own.
#
#   ca.pem             a test CA                (ca.key)
#   server.pem/.key    CN=localhost, SAN localhost, 127.0.0.1, ::1; signed by ca
#   server.bundle.pem  server.pem + server.key (HAProxy's `crt` takes one file)
#   client.pem/.key    CN=mfma-client; signed by ca
#   client.bundle.pem  client.pem + client.key (HAProxy's `crt` towards mfmad)
#   other-ca.pem       a second CA, which nothing above trusts
#   other-server.pem/.key, other-client.pem/.key  the same, signed by other-ca
#
# docs/security.md shows the same commands for a real deployment.
set -euo pipefail
dir=${1:?usage: make_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077
days=2

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # name cn
  newkey "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days "$days" -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}

leaf() { # name cn ca ext
  newkey "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

server_ext="basicConstraints=CA:FALSE
keyUsage=digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
client_ext="basicConstraints=CA:FALSE
keyUsage=digitalSignature
extendedKeyUsage=clientAuth"

ca ca "mfma test CA"
ca other-ca "mfma other CA"
leaf server localhost ca "$server_ext"
leaf client mfma-client ca "$client_ext"
leaf other-server localhost other-ca "$server_ext"
leaf other-client mfma-other-client other-ca "$client_ext"
cat server.pem server.key > server.bundle.pem
cat client.pem client.key > client.bundle.pem
chmod 0644 ./*.pem
chmod 0600 ./*.key ./*.bundle.pem
