// eta-ppe: the packet processing engine daemon (see daemon.cc).
namespace ppe {
int daemon_main(int argc, char **argv);
}

int main(int argc, char **argv) { return ppe::daemon_main(argc, argv); }
