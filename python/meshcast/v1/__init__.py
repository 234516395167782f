"""The generated messages and stubs of meshcast's public API
(proto/meshcast/v1): job_pb2, plan_pb2, types_pb2, controller_pb2,
controller_pb2_grpc, worker_pb2, worker_pb2_grpc. Built by setup.py."""
