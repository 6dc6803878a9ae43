# syntax=docker/dockerfile:1

# Build a static lazyapi binary.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
RUN CGO_ENABLED=0 go build -trimpath \
	-ldflags "-s -w -X main.version=${VERSION}" \
	-o /out/lazyapi ./cmd/lazyapi

# Run it as a non-root user in a minimal image.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lazyapi /usr/local/bin/lazyapi
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/lazyapi"]
# Listen on all interfaces inside the container; any arguments given to
# `docker run` replace these, so pass --bind-address=0.0.0.0 again with them.
CMD ["--bind-address=0.0.0.0"]
